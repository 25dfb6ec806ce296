"""`qinglong` catalogue commands: list and show what is enrolled and created, disable and enable Workers,
subjects and tasks, set and revoke roles. Each one is operator (DBA connection) calls of ql_api functions in one
transaction; wherever an id is asked for, a name works too (a Worker's, subject's or Project's name globally,
a task's name within its Project). Output: a table by default, `--json` for the same fields as one document.
Touches: the database given by --dsn or QINGLONG_DSN, stdout. Failures are the caller's: the transaction
runner handed to add_commands turns refusals into one line and exit 2, an unreachable database into exit 3.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from qinglong.cli import operators as op

Runner = Callable[[argparse.Namespace, Callable[[Any], dict[str, Any]]], dict[str, Any]]
ROLES = ("owner", "admin", "operator", "viewer")


def _refused(message: str) -> Exception:
    """A refusal found by the CLI itself (inside the transaction, so it rolls back): one line, exit 2."""
    from qinglong.cli.admin import Refused

    return Refused(message)


def _when(ms: Any) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(int(ms) / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return " ".join(str(v) for v in value) or "-"
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns padded to their widest cell; None is '-', booleans yes/no, lists space-separated."""
    cells = [list(headers)] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def _emit(args: argparse.Namespace, document: Mapping[str, Any], text: str) -> int:
    print(json.dumps(document, indent=2) if args.json else text)
    return 0


def _one(items: Sequence[dict[str, Any]], key: str, wanted: str, what: str, id_key: str) -> dict[str, Any]:
    """The item whose id or `key` (name) is `wanted`; none or several is a refusal."""
    found = [i for i in items if str(i[id_key]) == wanted.lower() or i[key] == wanted]
    if not found:
        raise _refused(f"no {what} {wanted!r}")
    if len(found) > 1:
        raise _refused(f"{len(found)} {what}s are named {wanted!r}: name one by its id")
    return found[0]


def project_id(tx: Any, wanted: str) -> str:
    """The id of the project named `wanted` (or whose id it is), inside the caller's transaction."""
    return str(_one(tx.call(op.project_list_v1)["projects"], "name", wanted, "project", "projectId")["projectId"])


def worker_id(tx: Any, wanted: str) -> str:
    """The id of the Worker named `wanted` (or whose id it is), inside the caller's transaction."""
    return str(_one(tx.call(op.worker_list_v1)["workers"], "name", wanted, "worker", "workerId")["workerId"])


# -- handlers -----------------------------------------------------------------------------------------


def _worker_list(run: Runner) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        listed = run(args, lambda tx: tx.call(op.worker_list_v1))
        rows = [
            (w["workerId"], w["name"], w["pool"], w["generation"], w["status"], w["online"], w["activeAttempts"],
             _when(w["lastContactAtMs"]), _when(w["certNotAfterMs"]))
            for w in listed["workers"]
        ]  # fmt: skip
        heads = ("ID", "NAME", "POOL", "GENERATION", "STATUS", "ONLINE", "ATTEMPTS", "LAST CONTACT", "CERT EXPIRES")
        return _emit(args, {"workers": listed["workers"]}, table(heads, rows))

    return handler


def _worker_status(run: Runner, active: bool) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        done = run(args, lambda tx: tx.call(op.worker_status_set_v1, p_worker=args.worker, p_active=active))
        closed = f", session {done['closedSessionId']} closed" if done["closedSessionId"] else ""
        already = "" if done["changed"] else " (already)"
        return _emit(args, done, f"worker {done['name']} {done['workerId']}: {done['status']}{already}{closed}")

    return handler


def _project_list(run: Runner) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        listed = run(args, lambda tx: tx.call(op.project_list_v1))
        rows = [
            (p["projectId"], p["name"], p["status"], p["version"], p["tasks"], _when(p["createdAtMs"]))
            for p in listed["projects"]
        ]
        heads = ("ID", "NAME", "STATUS", "VERSION", "TASKS", "CREATED")
        return _emit(args, {"projects": listed["projects"]}, table(heads, rows))

    return handler


def _subject_list(run: Runner) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        listed = run(args, lambda tx: tx.call(op.subject_list_v1))
        rows = [
            (s["subjectId"], s["name"], s["kind"], s["status"], [f"{r['project']}:{r['role']}" for r in s["roles"]])
            for s in listed["subjects"]
        ]
        heads = ("ID", "NAME", "KIND", "STATUS", "ROLES")
        return _emit(args, {"subjects": listed["subjects"]}, table(heads, rows))

    return handler


def _subject_status(run: Runner, active: bool) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        done = run(args, lambda tx: tx.call(op.subject_status_set_v1, p_subject=args.subject, p_active=active))
        already = "" if done["changed"] else " (already)"
        return _emit(args, done, f"subject {done['name']} {done['subjectId']}: {done['status']}{already}")

    return handler


def _task_list(run: Runner) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        listed = run(args, lambda tx: tx.call(op.task_list_v1, p_project=args.project))
        rows = [
            (
                t["taskId"],
                t["name"],
                t["status"],
                t["pool"],
                t["argv"],
                t["schedule"]["cron"] if t["schedule"] else None,
            )
            for t in listed["tasks"]
        ]
        text = table(("ID", "NAME", "STATUS", "POOL", "ARGV", "SCHEDULE"), rows)
        return _emit(args, {"projectId": listed["projectId"], "project": listed["project"], "tasks": listed["tasks"]},
                     text)  # fmt: skip

    return handler


def _task_status(run: Runner, active: bool) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        done = run(
            args, lambda tx: tx.call(op.task_status_set_v1, p_project=args.project, p_task=args.task, p_active=active)
        )
        already = "" if done["changed"] else " (already)"
        return _emit(args, done, f"task {done['name']} {done['taskId']}: {done['status']}{already}")

    return handler


def _task_show(run: Runner) -> Callable[[argparse.Namespace], int]:
    def body(args: argparse.Namespace, tx: Any) -> dict[str, Any]:
        listed = tx.call(op.task_list_v1, p_project=args.project)
        task = _one(listed["tasks"], "name", args.task, "task", "taskId")
        schedule = tx.call(op.task_schedule_show_v1, p_project_id=listed["projectId"], p_name=task["name"], p_count=5)
        return {"projectId": listed["projectId"], "project": listed["project"], **task,
                "schedule": None if schedule["status"] == "unscheduled" else schedule}  # fmt: skip

    def handler(args: argparse.Namespace) -> int:
        shown = run(args, lambda tx: body(args, tx))
        lines = [
            f"task        {shown['name']} {shown['taskId']}",
            f"project     {shown['project']} {shown['projectId']}",
            f"status      {shown['status']}",
            f"revision    {_cell(shown['revisionId'])}",
            f"argv        {json.dumps(shown['argv'])}",
            f"pool        {shown['pool']}",
            f"timeoutMs   {_cell(shown['timeoutMs'])}",
            f"maxAttempts {_cell(shown['maxAttempts'])}",
        ]
        sched = shown["schedule"]
        if sched is None:
            lines.append("schedule    -")
        else:
            lines.append(f"schedule    {sched['cron']!r} {sched['timezone']}, overlap {sched['overlap']}")
            lines += [f"  next      {n['local']}" for n in sched["next"]]
            lines += [f"  last      {f['local']}  {f['outcome']}" for f in sched["last"]]
        return _emit(args, shown, "\n".join(lines))

    return handler


def _role(run: Runner, revoke: bool) -> Callable[[argparse.Namespace], int]:
    def body(args: argparse.Namespace, tx: Any) -> dict[str, Any]:
        project = _one(tx.call(op.project_list_v1)["projects"], "name", args.project, "project", "projectId")
        subject = _one(tx.call(op.subject_list_v1)["subjects"], "name", args.subject, "subject", "subjectId")
        role = args.role if not revoke else next(
            (r["role"] for r in subject["roles"] if r["projectId"] == project["projectId"]), None)  # fmt: skip
        if role is None:
            raise _refused(f"subject {subject['name']} has no role in project {project['name']}: nothing to revoke")
        done = tx.call(op.role_binding_set_v1, p_project_id=project["projectId"], p_subject_id=subject["subjectId"],
                       p_role=role, p_active=not revoke)  # fmt: skip
        return {"projectId": project["projectId"], "project": project["name"], "subjectId": subject["subjectId"],
                "subject": subject["name"], "role": done["role"], "active": done["active"]}  # fmt: skip

    def handler(args: argparse.Namespace) -> int:
        done = run(args, lambda tx: body(args, tx))
        verb = f"is {done['role']}" if done["active"] else f"no longer {done['role']}"
        return _emit(args, done, f"subject {done['subject']} {verb} in project {done['project']}")

    return handler


# -- parser -------------------------------------------------------------------------------------------


def add_commands(
    worker: Any, project: Any, subject: Any, task: Any, group: Callable[[str, str], Any],
    dsn: Callable[[argparse.ArgumentParser], None], run: Runner,
) -> None:  # fmt: skip
    """Add the catalogue commands to the existing worker, project, subject and task groups, and a `role` group.
    `run(args, body)` runs body(transaction) over the DBA connection, turning failures into one line."""

    def command(where: Any, name: str, text: str, handler: Callable[[argparse.Namespace], int]) -> Any:
        p = where.add_parser(name, help=text)
        dsn(p)
        p.add_argument("--json", action="store_true", help="the same fields as one JSON document")
        p.set_defaults(handler=handler)
        return p

    text = "every Worker: pool, generation, online (a live session), Attempts, last contact, certificate expiry"
    command(worker, "list", text, _worker_list(run))
    for name, active, text in (
        ("disable", False, "disable a Worker: its session closes (fenced at once), no new session opens"),
        ("enable", True, "enable a disabled Worker"),
    ):
        command(worker, name, text, _worker_status(run, active)).add_argument(
            "worker", metavar="NAME|ID", help="the Worker, by name or id"
        )

    command(project, "list", "every Project: status, version, task count", _project_list(run))

    command(subject, "list", "every subject: kind, status, roles (never a token)", _subject_list(run))
    for name, active, text in (
        ("disable", False, "disable a subject: the user API refuses it from now on"),
        ("enable", True, "enable a disabled subject"),
    ):
        command(subject, name, text, _subject_status(run, active)).add_argument(
            "subject", metavar="NAME|ID", help="the subject, by name or id"
        )

    p = command(task, "list", "a Project's tasks: pool, argv, schedule", _task_list(run))
    p.add_argument("--project", required=True, metavar="NAME|ID", help="the project, by name or id")
    p = command(task, "show", "a task: its current revision's plan and its schedule", _task_show(run))
    p.add_argument("--project", required=True, metavar="NAME|ID", help="the project, by name or id")
    p.add_argument("task", metavar="NAME|ID", help="the task, by name or id within the project")

    for name, active, text in (
        ("disable", False, "disable a task: neither users nor the scheduler queue its Runs"),
        ("enable", True, "enable a disabled task"),
    ):
        p = command(task, name, text, _task_status(run, active))
        p.add_argument("--project", required=True, metavar="NAME|ID", help="the project, by name or id")
        p.add_argument("task", metavar="NAME|ID", help="the task, by name or id within the project")

    role = group("role", "subjects' roles in Projects")
    for name, revoke, text in (
        ("set", False, "grant or change a subject's role in a Project"),
        ("revoke", True, "revoke a subject's role in a Project"),
    ):
        p = command(role, name, text, _role(run, revoke))
        p.add_argument("--project", required=True, metavar="NAME|ID", help="the project, by name or id")
        p.add_argument("--subject", required=True, metavar="NAME|ID", help="the subject, by name or id")
        if not revoke:
            p.add_argument("--role", required=True, choices=ROLES, help="the role to bind")
