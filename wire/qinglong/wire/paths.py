"""Every route's path, once, as a template. Touches nothing: declarations.

`{name}` is a path parameter: each `{…Id}` a canonical UUID, `{project}` a Project's id or unique name, `{task}` a
task's unique name within it,
`{phase}` one of qinglong.wire.activation.PHASES. The shell's route table (qinglong.shell.routes) serves
these paths, the Worker and the CLI fill them in with `str.format`, and the web console reads them from the
shell (qinglong.shell.console). docs/protocol.md lists them with their routes.
"""

from __future__ import annotations

from typing import Final

# The worker ingress (mTLS; every route but the session open signed with ql3w).
SESSIONS: Final = "/api/v3/workers/{workerId}/sessions"  # POST: open a session
SESSION: Final = SESSIONS + "/{sessionId}"
HEARTBEAT: Final = SESSION + "/heartbeat"
OFFERS_PULL: Final = SESSION + "/offers:pull"
LEASE_CONTROL: Final = SESSION + "/lease-control"
OFFER: Final = SESSION + "/offers/{offerId}"
ACTIVATION: Final = OFFER + "/activation/{phase}"
ARTIFACTS: Final = OFFER + "/artifacts"
OUTPUT: Final = OFFER + "/output"
OUTPUT_LOST: Final = OFFER + "/output:lost"  # POST: output the database refused, recorded as lost
BUNDLE_CHUNKS: Final = OFFER + "/bundle-chunks"  # POST: read one chunk of the plan's bundle
COMPLETION: Final = OFFER + "/completion"

# The user API (bearer token).
PROJECTS: Final = "/api/v3/projects"  # GET: the Projects the subject may read (the one route naming no Project)
PROJECT: Final = PROJECTS + "/{project}"
RUNS: Final = PROJECT + "/runs"
RUN: Final = RUNS + "/{runId}"
RUN_CANCELLATION: Final = RUN + "/cancellation"
RUN_OUTPUT: Final = RUN + "/output"
TASKS: Final = PROJECT + "/tasks"
TASK: Final = TASKS + "/{task}"  # PUT: a new revision (a new task first); {task} is the task's name
TASK_STATUS: Final = TASK + "/status"  # PUT: enable or disable
TASK_SCHEDULE: Final = TASK + "/schedule"  # PUT: set, change or clear
SCHEDULE_PREVIEW: Final = PROJECT + "/schedule-preview"  # GET: the next fire times of an expression
WORKERS: Final = PROJECT + "/workers"
SECRETS: Final = PROJECT + "/secrets"
SECRET: Final = SECRETS + "/{name}"  # PUT: set a new version
SECRET_DELETION: Final = SECRET + "/deletion"  # POST: delete
NOTIFY_RULES: Final = PROJECT + "/notify-rules"  # GET: the live rules
NOTIFY_RULE: Final = NOTIFY_RULES + "/{rule}"  # PUT: create or replace
NOTIFY_RULE_REMOVAL: Final = NOTIFY_RULE + "/removal"  # POST: remove
NOTIFY_DELIVERIES: Final = PROJECT + "/notify-deliveries"  # GET: the latest notifications and their attempts
