"""`qinglong run`: queue, cancel, show, list Runs and read their output, through the user API as any user does
(admission, audit and the policy fence apply). A Run is named by its id or a short id (its first 8 or more hex
digits); cancel, show and logs find its Project themselves. Touches the shell (HTTPS), the CA and token files, the
profile.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from qinglong.cli.common import (
    EXIT_OUTCOMES,
    Commands,
    Failure,
    api_options,
    group,
    id_prefix,
    instant_ms,
    is_uuid,
    name,
    positive,
    run_argument,
    the_run,
)
from qinglong.cli.connect import UserScope, listing, one, user_api
from qinglong.cli.printing import created
from qinglong.wire.common import RUN_STATUSES


def _scope(args: argparse.Namespace) -> UserScope:
    return UserScope(user_api(args), args.project)


def _task_id(scope: UserScope, task: str) -> str:
    """A task named by its id, or by its name or short id within the project (one call to its task list)."""
    if is_uuid(task):
        return task.lower()
    listed = scope.call(f"listing the tasks of project {scope.project}", lambda p: scope.api.tasks(p))
    where = f"in project {listed['project']}"
    return str(one(listed["tasks"], "name", task, "task", "taskId", where)["taskId"])


def _run_id(scope: UserScope, run: str) -> str:
    """The Run's full id; without a --project, or named by a short id, it is looked up among the Runs of the
    Projects the token may read, which also sets the scope's Project to the Run's."""
    if is_uuid(run) and scope.project is not None:
        return run
    found = scope.projects(id_prefix(run))
    runs = [r for r in found["runs"] if scope.project is None or scope.project in (r["project"], r["projectId"])
            or starts_project(r["projectId"], scope.project)]  # fmt: skip
    if not runs:
        where = f"project {scope.project}" if scope.project else f"the projects you can see ({scope.seen(found)})"
        raise Failure(f"no Run {run!r} in {where}")
    if len(runs) > 1:
        each = listing([f"{r['runId']} ({r['project']}, {r['taskName']}, {r['status']})" for r in runs])
        many = f"{len(runs)}{' or more' if found['moreRuns'] else ''}"
        raise Failure(f"{many} Runs' ids start with {run!r}: {each}: give more of the id")
    scope.project = runs[0]["projectId"]
    return str(runs[0]["runId"])


def starts_project(project_id: str, given: str) -> bool:
    prefix = id_prefix(given)
    return prefix is not None and project_id.replace("-", "").startswith(prefix)


def enqueue(args: argparse.Namespace) -> int:
    scope = _scope(args)
    task = _task_id(scope, args.task)
    result = scope.call(f"run enqueue of task {args.task} in project {args.project}",
                        lambda p: scope.api.enqueue(p, task),
                        f"no task {args.task!r} in project {args.project}")  # fmt: skip
    return created(args, result["runId"], result, f"run {result['runId']}: {result['status']}")


def cancel(args: argparse.Namespace) -> int:
    scope = _scope(args)
    run = _run_id(scope, the_run(args))
    result = scope.call(f"run cancel {run}", lambda p: scope.api.cancel(p, run), _missing(scope, run))
    print(
        json.dumps(result, indent=2) if args.json else f"run {run}: {result['status']} (status {result['runStatus']})"
    )
    return 0


def _missing(scope: UserScope, run: str) -> str:
    return f"no Run {run} in project {scope.project} (`qinglong run list --project {scope.project}` lists its Runs)"


def show(args: argparse.Namespace) -> int:
    from qinglong.cli.timeline import render

    scope = _scope(args)
    run = _run_id(scope, the_run(args))
    timeline = scope.call(f"run show {run}", lambda p: scope.api.show(p, run), _missing(scope, run))
    print(json.dumps(timeline, indent=2) if args.json else render(timeline))
    return 0


def list_runs(args: argparse.Namespace) -> int:
    from qinglong.cli.timeline import render_runs
    from qinglong.wire import RunListQuery, WireError

    scope = _scope(args)
    task = None if args.task is None else _task_id(scope, args.task)
    try:
        query = RunListQuery(
            task_id=task, status=args.status, since_ms=args.since,
            until_ms=args.until, limit=args.limit, cursor=args.cursor,
        )  # fmt: skip
    except WireError as exc:
        raise Failure(f"bad filter: {exc.message}") from None
    page = scope.call(f"run list of project {args.project}", lambda p: scope.api.list_runs(p, query.to_query()))
    if args.ids:
        print("\n".join(r["runId"] for r in page["runs"]))
    else:
        print(json.dumps(page, indent=2) if args.json else render_runs(page))
    return 0


def logs(args: argparse.Namespace) -> int:
    from qinglong.cli.output import print_logs
    from qinglong.cli.timeline import reasons
    from qinglong.wire import RunOutputQuery

    scope = _scope(args)
    run = _run_id(scope, the_run(args))

    def fetch(attempt: int | None, after: int | None) -> dict[str, Any]:
        query = RunOutputQuery(attempt=attempt, after=after).to_query()
        return scope.call(f"run logs {run}", lambda p: scope.api.output(p, run, query), _missing(scope, run))

    def explain(attempt: dict[str, Any]) -> str | None:
        """Why the Attempt ended without an exit code: its end in the Run's timeline (the Worker's message)."""
        timeline = scope.call(f"run logs {run}", lambda p: scope.api.show(p, run), _missing(scope, run))
        found = reasons(timeline, attempt["attemptId"])
        return found[-1] if found else None

    ended = print_logs(fetch, args.attempt, args.follow, args.json, explain)
    return EXIT_OUTCOMES.get(ended, 1) if args.follow and ended is not None else 0


def register(top: Commands) -> None:
    run = group(top, "run", "Runs, through the user API")
    p = run.add_parser("enqueue", help="queue a Run of a task (prints the Run's id)")
    api_options(p)
    p.add_argument("--verbose", action="store_true", help="also print a sentence on stderr")
    p.add_argument("--task", type=name, required=True, metavar="NAME|ID", help="the task, by name, id or short id")
    p.set_defaults(handler=enqueue)
    p = run.add_parser("cancel", help="ask to cancel a Run (reason user)")
    api_options(p, project=False)
    run_argument(p)
    p.set_defaults(handler=cancel)
    p = run.add_parser("show", help="a Run's event timeline")
    api_options(p, project=False)
    run_argument(p)
    p.set_defaults(handler=show)
    p = run.add_parser("list", help="a project's Runs, newest first, one page at a time")
    api_options(p)
    p.add_argument("--task", type=name, metavar="NAME|ID", help="only this task's Runs, by name, id or short id "
                   "(default: every task's)")  # fmt: skip
    p.add_argument("--status", choices=RUN_STATUSES, help="only Runs in this status (default: any)")
    p.add_argument("--since", type=instant_ms, metavar="ISO", help="created at or after (no offset: UTC; default: "
                   "no bound)")  # fmt: skip
    p.add_argument("--until", type=instant_ms, metavar="ISO", help="created before (no offset: UTC; default: no bound)")
    p.add_argument("--limit", type=positive, help="Runs per page, at most 100 (default 50)")
    p.add_argument("--cursor", help="the next page: the cursor the previous page printed (default: the first page)")
    p.add_argument("--ids", action="store_true", help="print only the Runs' ids, one per line")
    p.set_defaults(handler=list_runs)
    codes = ", ".join(f"{code} {status}" for status, code in EXIT_OUTCOMES.items())
    p = run.add_parser(
        "logs",
        help="a Run's output: its stdout on stdout, its stderr on stderr",
        description=f"A Run's output: its stdout on stdout, its stderr on stderr. An Attempt that ended without its "
        "task's exit code gets one line on stderr saying why (a start failure: that nothing ran). With --follow it "
        f"exits with how the Run (or the --attempt followed) ended: {codes} (any other end of an Attempt: 1); 130 on "
        "Ctrl-C.",
    )
    api_options(p, project=False)
    run_argument(p)
    p.add_argument("--attempt", type=positive, help="this Attempt (its number; default: the latest)")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new output until the Run ends, then "
                   "exit with its outcome")  # fmt: skip
    p.set_defaults(handler=logs)
