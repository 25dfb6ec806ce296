"""`qinglong task revise | activate | deactivate | reschedule | preview`: the user API's task commands (task.write:
owner and admin; a preview needs run.read), the same requests the web console sends. `task create`, `enable`,
`disable` and `schedule` do the same as an operator's DBA transaction; these go through the shell, so admission,
audit and the policy fence apply. Touches the shell (HTTPS), the CA and token files, the profile, and for `revise
--sign` the operator's plan key.

`revise --sign KEY` signs the plan for the Project (its id from the project view) before it is sent: the web console
makes unsigned revisions only, which a Worker that requires signed plans refuses to start (decision 0017).
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from qinglong.cli.common import Commands, Failure, api_options, name, positive
from qinglong.cli.connect import UserScope, user_api
from qinglong.cli.printing import emit, status_set
from qinglong.wire.codec import WireError
from qinglong.wire.offer import Plan
from qinglong.wire.task_change import PREVIEW_MAX, SchedulePreviewQuery

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


PlanOf = Callable[[argparse.Namespace], dict[str, Any]]  # task create's plan from its flags
KeyOf = Callable[[Path | None], "Ed25519PrivateKey | None"]  # task create's --sign key


def revise(args: argparse.Namespace, plan_of: PlanOf, key_of: KeyOf) -> int:
    try:
        plan = Plan.from_obj(plan_of(args))
    except WireError as exc:
        raise Failure(f"the plan: {exc.message}") from None
    key = key_of(args.sign)
    scope = UserScope(user_api(args), args.project)
    signature = None
    if key is not None:
        from qinglong.wire.signing import sign

        view = scope.call(f"project {args.project}", scope.api.project_view)
        signature = sign(key, view["projectId"], plan).to_obj()
    done = scope.call(f"task revise {args.name} in project {args.project}",
                      lambda p: scope.api.revise_task(p, args.name, plan.to_obj(), signature))  # fmt: skip
    signed = "signed" if done["signed"] else "unsigned"
    return emit(args, done, f"task {done['name']}: {done['status']} {done['taskId']} "
                            f"(revision {done['revisionId']}, {signed})")  # fmt: skip


def set_active(args: argparse.Namespace, active: bool) -> int:
    scope = UserScope(user_api(args), args.project)
    done = scope.call(f"task {'activate' if active else 'deactivate'} {args.name} in project {args.project}",
                      lambda p: scope.api.set_task_status(p, args.name, active),
                      f"no task {args.name} in project {args.project} (`task list` lists them)")  # fmt: skip
    return status_set(args, done, "task", "taskId")


def _fires(shown: dict[str, Any]) -> list[str]:
    return [f"  next  {f['local']}" for f in shown["fires"]]


def reschedule(args: argparse.Namespace) -> int:
    scope = UserScope(user_api(args), args.project)
    cron = None if args.clear else args.cron
    done = scope.call(f"task reschedule {args.name} in project {args.project}",
                      lambda p: scope.api.set_task_schedule(p, args.name, cron, args.timezone, args.overlap),
                      f"no task {args.name} in project {args.project} (`task list` lists them)")  # fmt: skip
    text = f"task {args.name}: schedule {done['status']}"
    if done.get("cron"):
        text += f": {done['cron']!r} {done['timezone']}, overlap {done['overlap']}"
    return emit(args, done, text)


def preview(args: argparse.Namespace) -> int:
    query = SchedulePreviewQuery(cron=args.cron, timezone=args.timezone, count=args.count).to_query()
    scope = UserScope(user_api(args), args.project)
    shown = scope.call(f"schedule preview in project {args.project}", lambda p: scope.api.preview_schedule(p, query))
    return emit(args, shown, "\n".join([f"{shown['cron']!r} {shown['timezone']}:", *_fires(shown)]))


NOT_PLAN: Final = frozenset(
    {"help", "dsn", "project", "name", "bundle", "sign", "schedule", "timezone", "overlap", "argv", "json", "verbose"}
)  # create's flags that are not the plan's (revise has its own)


def _plan_flags(create: argparse.ArgumentParser, revise: argparse.ArgumentParser) -> None:
    """The plan's flags of `task create` (what _plan reads), declared once there, on `task revise` too."""
    for action in create._actions:
        if action.dest not in NOT_PLAN:
            revise._add_action(action)


def add_api_commands(task: Commands, plan_of: PlanOf, key_of: KeyOf, default_key: Path | None) -> None:
    """The user API's task commands, in the task group: `task create`'s plan flags, plan and key reading are given
    (qinglong.cli.commands.task, which imports this module)."""
    p = task.add_parser("revise", help="create a task or give it a new revision, through the user API (task.write)")
    api_options(p)
    p.add_argument("--name", type=name, required=True, help="the task's name (a new plan under it is a new revision)")
    _plan_flags(task.choices["create"], p)
    p.add_argument("--sign", type=Path, metavar="KEY", default=default_key, help="sign the plan with this operator key "
                   "(default QINGLONG_PLAN_KEY): Workers that require signed plans run only those")  # fmt: skip
    p.add_argument("argv", nargs="+", help="the command, after --")
    p.set_defaults(handler=functools.partial(revise, plan_of=plan_of, key_of=key_of))
    for command, active, text in (
        ("deactivate", False, "disable a task through the user API (task.write)"),
        ("activate", True, "enable a task through the user API (task.write)"),
    ):
        p = task.add_parser(command, help=text)
        api_options(p)
        p.add_argument("name", type=name, metavar="NAME", help="the task's name")
        p.set_defaults(handler=functools.partial(set_active, active=active))
    p = task.add_parser("reschedule", help="set, change or clear a task's schedule through the user API (task.write)")
    api_options(p)
    p.add_argument("name", type=name, metavar="NAME", help="the task's name")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--cron", help="5 cron fields, or 6 with a second first, e.g. '*/10 * * * * *', or @daily …")
    what.add_argument("--clear", action="store_true", help="remove the schedule")
    p.add_argument("--timezone", default="UTC", help="the IANA time zone the fields are read in (default UTC)")
    p.add_argument("--overlap", choices=("skip", "allow"), default="skip",
                   help="skip (default) or allow a fire time while a Run of the task is not terminal")  # fmt: skip
    p.set_defaults(handler=reschedule)
    p = task.add_parser("preview", help="the next fire times a cron expression would have (run.read)")
    api_options(p)
    p.add_argument("--cron", required=True, help="5 cron fields, or 6 with a second first")
    p.add_argument("--timezone", default="UTC", help="the IANA time zone the fields are read in (default UTC)")
    p.add_argument("--count", type=positive, default=5, help=f"how many fire times (1..{PREVIEW_MAX}; default 5)")
    p.set_defaults(handler=preview)
