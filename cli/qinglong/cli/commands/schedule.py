"""`qinglong task schedule`: set, clear or show a task's schedule and its next and last fire times, in one operator
transaction; and how a schedule is printed (task create --schedule prints it too).
Touches the database (DBA connection from --dsn or QINGLONG_DSN).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from qinglong.cli import operators as op
from qinglong.cli.common import PROJECT_HELP, Commands, dsn_option, name, positive
from qinglong.cli.connect import admin_transaction, one, project_id

if TYPE_CHECKING:
    from qinglong.cli.admin import Transaction


def schedule_lines(heading: str, shown: dict[str, Any]) -> list[str]:
    """A schedule as task_schedule_show_v1 answers it: the definition, the next and the last fire times (local)."""
    lines = [f"{heading} {shown['cron']!r} {shown['timezone']}, overlap {shown['overlap']}"]
    lines += [f"  next  {n['local']}" for n in shown["next"]]
    for f in shown["last"]:
        what = {
            "enqueued": f"run {f['runId']}",
            "skipped_overlap": f"while run {f['blockingRunId']} was not terminal",
            "skipped_inactive": "the project is archived, the task is disabled or has no revision",
        }[f["outcome"]]
        lines.append(f"  last  {f['local']}  {f['outcome']}  {what}{'  (caught up)' if f['caughtUp'] else ''}")
    return lines


def schedule(args: argparse.Namespace) -> int:
    def body(tx: Transaction) -> dict[str, Any]:  # a change and the schedule it leaves, in one transaction
        changed: dict[str, Any] = {}
        listed = tx.call(op.task_list_v1, p_project=project_id(tx, args.project))
        project = listed["projectId"]
        task = one(listed["tasks"], "name", args.name, "task", "taskId", f"in project {listed['project']}")["name"]
        if not args.show:
            changed = tx.call(op.task_schedule_set_v1, p_project_id=project, p_name=task, p_cron=args.cron,
                              p_timezone=args.timezone, p_overlap=args.overlap)  # fmt: skip
        shown = tx.call(op.task_schedule_show_v1, p_project_id=project, p_name=task, p_count=args.count)
        return {"changed": changed, "shown": shown}

    result = admin_transaction(args, body)
    changed, shown = result["changed"], result["shown"]
    if args.json:
        print(json.dumps(result, indent=2))
    elif shown["status"] == "unscheduled":
        verb = f"schedule {changed['status']}, " if changed else ""
        print(f"task {args.name}: {verb}no schedule")
    else:
        heading = f"task {args.name}: schedule {changed['status']}:" if changed else f"task {args.name}:"
        print("\n".join(schedule_lines(heading, shown)))
    return 0


def add_schedule(task: Commands) -> None:
    """`schedule` in the task group."""
    p = task.add_parser("schedule", help="set, clear or show a task's schedule and its next fire times")
    dsn_option(p)
    p.add_argument("--project", type=name, required=True, metavar="NAME|ID", help=PROJECT_HELP)
    p.add_argument("--name", required=True, metavar="NAME|ID", help="the task, by name, id or short id")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--cron", help="set it: 5 cron fields (minute hour day-of-month month day-of-week) or @daily …")
    what.add_argument("--clear", action="store_true", help="remove the schedule")
    what.add_argument("--show", action="store_true", help="print it, its next and its last fire times")
    p.add_argument("--timezone", default="UTC", help="the IANA time zone the fields are read in (default UTC)")
    p.add_argument("--overlap", choices=("skip", "allow"), default="skip",
                   help="skip (default) or allow a fire time while a Run of the task is not terminal")  # fmt: skip
    p.add_argument(
        "--count", type=positive, default=5, help="how many next and last fire times to print (1..100; default 5)"
    )
    p.add_argument("--json", action="store_true", help="print the change and the schedule as one JSON document")
    p.set_defaults(handler=schedule)
