"""`qinglong run`: queue, cancel, show, list Runs and read their output, through the user API as any user does
(admission, audit and the policy fence apply). Touches the shell (HTTPS), the CA and token files, the profile.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from qinglong.cli.common import Commands, Failure, api_options, group, instant_ms, is_uuid, name, positive, uuid_text
from qinglong.cli.connect import user_api, user_call
from qinglong.cli.printing import created
from qinglong.wire.common import RUN_STATUSES

if TYPE_CHECKING:
    from qinglong.cli.api import UserApi


def _task_id(api: UserApi, project: str, task: str) -> str:
    """A task named by its id, or by its name within the project (one call to the project's task list)."""
    if is_uuid(task):
        return task.lower()
    listed = user_call(lambda: api.tasks(project))
    found = [t["taskId"] for t in listed["tasks"] if t["name"] == task]
    if not found:
        raise Failure(f"no task {task!r} in project {project}")
    return str(found[0])


def enqueue(args: argparse.Namespace) -> int:
    api = user_api(args)
    task = _task_id(api, args.project, args.task)
    result = user_call(lambda: api.enqueue(args.project, task))
    return created(args, result["runId"], result, f"run {result['runId']}: {result['status']}")


def cancel(args: argparse.Namespace) -> int:
    api = user_api(args)
    result = user_call(lambda: api.cancel(args.project, args.run))
    print(
        json.dumps(result, indent=2)
        if args.json
        else f"run {args.run}: {result['status']} (status {result['runStatus']})"
    )
    return 0


def show(args: argparse.Namespace) -> int:
    from qinglong.cli.timeline import render

    api = user_api(args)
    timeline = user_call(lambda: api.show(args.project, args.run))
    print(json.dumps(timeline, indent=2) if args.json else render(timeline))
    return 0


def list_runs(args: argparse.Namespace) -> int:
    from qinglong.cli.timeline import render_runs
    from qinglong.wire import RunListQuery, WireError

    api = user_api(args)
    task = None if args.task is None else _task_id(api, args.project, args.task)
    try:
        query = RunListQuery(
            task_id=task, status=args.status, since_ms=args.since,
            until_ms=args.until, limit=args.limit, cursor=args.cursor,
        )  # fmt: skip
    except WireError as exc:
        raise Failure(f"bad filter: {exc.message}") from None
    page = user_call(lambda: api.list_runs(args.project, query.to_query()))
    if args.ids:
        print("\n".join(r["runId"] for r in page["runs"]))
    else:
        print(json.dumps(page, indent=2) if args.json else render_runs(page))
    return 0


def logs(args: argparse.Namespace) -> int:
    from qinglong.cli.output import print_logs
    from qinglong.wire import RunOutputQuery

    api = user_api(args)

    def fetch(attempt: int | None, after: int | None) -> dict[str, Any]:
        query = RunOutputQuery(attempt=attempt, after=after).to_query()
        return user_call(lambda: api.output(args.project, args.run, query))

    print_logs(fetch, args.attempt, args.follow, args.json)
    return 0


def register(top: Commands) -> None:
    run = group(top, "run", "Runs, through the user API")
    p = run.add_parser("enqueue", help="queue a Run of a task (prints the Run's id)")
    api_options(p)
    p.add_argument("--verbose", action="store_true", help="also print a sentence on stderr")
    p.add_argument("--task", type=name, required=True, metavar="NAME|ID", help="the task, by name or id")
    p.set_defaults(handler=enqueue)
    p = run.add_parser("cancel", help="ask to cancel a Run (reason user)")
    api_options(p)
    p.add_argument("--run", type=uuid_text, required=True, help="the Run's id")
    p.set_defaults(handler=cancel)
    p = run.add_parser("show", help="a Run's event timeline")
    api_options(p)
    p.add_argument("--run", type=uuid_text, required=True, help="the Run's id")
    p.set_defaults(handler=show)
    p = run.add_parser("list", help="a project's Runs, newest first, one page at a time")
    api_options(p)
    p.add_argument("--task", type=name, metavar="NAME|ID", help="only this task's Runs (by name or id)")
    p.add_argument("--status", choices=RUN_STATUSES, help="only Runs in this status")
    p.add_argument("--since", type=instant_ms, metavar="ISO", help="created at or after (no offset: UTC)")
    p.add_argument("--until", type=instant_ms, metavar="ISO", help="created before (no offset: UTC)")
    p.add_argument("--limit", type=positive, help="Runs per page, at most 100 (default 50)")
    p.add_argument("--cursor", help="the next page: the cursor the previous page printed")
    p.add_argument("--ids", action="store_true", help="print only the Runs' ids, one per line")
    p.set_defaults(handler=list_runs)
    p = run.add_parser("logs", help="a Run's output: its stdout on stdout, its stderr on stderr")
    api_options(p)
    p.add_argument("--run", type=uuid_text, required=True, help="the Run's id")
    p.add_argument("--attempt", type=positive, help="this Attempt (its number), not the latest")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new output until the Run ends")
    p.set_defaults(handler=logs)
