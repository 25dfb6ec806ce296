"""`qinglong task`: create a task (or a new revision of it) and its schedule, set, clear or show the schedule,
list and show tasks, disable and enable them. Each command is one operator transaction.
Touches the database (DBA connection from --dsn or QINGLONG_DSN); `create --bundle` reads the folder or file it
packs, `create --sign` the operator's plan key.

`create --bundle PATH` packs PATH (qinglong.wire.bundle), uploads it in chunks unless the database holds that
digest already (a re-upload is free; a partial one resumes) and pins the digest in the plan. `--sign KEY` signs the
plan with an operator key (qinglong.wire.signing) for the Project it is created in: the exact plan signed is the
one stored, so a Worker that checks signatures runs it, and runs nothing that was changed since.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qinglong.cli import operators as op
from qinglong.cli.commands.schedule import add_schedule, schedule_lines
from qinglong.cli.commands.task_api import add_api_commands
from qinglong.cli.common import (
    PROJECT_HELP,
    Commands,
    Failure,
    catalogue_command,
    creating_options,
    dsn_option,
    group,
    name,
    positive,
)
from qinglong.cli.connect import admin_transaction, one, project_id
from qinglong.cli.printing import cell, created, emit, plural, status_set, table
from qinglong.wire.bundle import CHUNK_BYTES
from qinglong.wire.codec import WireError
from qinglong.wire.offer import Plan

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from qinglong.cli.admin import Transaction
    from qinglong.wire.bundle import Packed


def _plan(args: argparse.Namespace) -> dict[str, Any]:
    """The revision's plan from the flags."""
    plan: dict[str, Any] = {"argv": args.argv}
    if args.timeout_ms is not None:
        plan["timeoutMs"] = args.timeout_ms
    if args.lease_ms is not None:
        plan["leaseMs"] = args.lease_ms
    if args.max_attempts is not None:
        plan["maxAttempts"] = args.max_attempts
    if args.retry_backoff_ms is not None:
        plan["retryBackoffMs"] = args.retry_backoff_ms
    if args.pool:
        plan["pool"] = args.pool
    if args.cwd:
        plan["cwd"] = args.cwd
    if args.user:
        plan["user"] = args.user
    if args.group:
        plan["group"] = args.group
    for flag, key, given in (
        ("--env", "env", args.env),
        ("--secret-env", "secretEnv", args.secret_env),
        ("--secret-file", "secretFiles", args.secret_file),
    ):
        if given:
            pairs = [e.split("=", 1) for e in given]
            if any(len(p) != 2 or not p[0] or (key != "env" and not p[1]) for p in pairs):
                raise Failure(f"{flag} takes {'NAME=VALUE' if key == 'env' else 'NAME=SECRET'}")
            plan[key] = dict(pairs)
    return plan


def _plan_key() -> Path | None:
    """QINGLONG_PLAN_KEY: the operator key `task create` signs with when --sign is not given."""
    given = os.environ.get("QINGLONG_PLAN_KEY")
    return Path(given) if given else None


def signing_key(path: Path | None) -> Ed25519PrivateKey | None:
    """The operator key --sign names (None: no --sign), or one line saying why it cannot be used."""
    if path is None:
        return None
    from qinglong.wire.signing import load_private_key

    try:
        return load_private_key(path)
    except ValueError as exc:
        raise Failure(f"--sign: {exc}") from None


def _upload(tx: Transaction, packed: Packed) -> None:
    """Store the bundle unless the database holds it; only the chunks it lacks are sent."""
    stat = tx.call(op.bundle_stat_v1, p_digest=packed.digest)
    if stat["status"] == "stored":
        return
    present = set(stat["presentChunks"]) if stat["sizeBytes"] == len(packed.data) else set()
    for index in range(0, max(1, -(-len(packed.data) // CHUNK_BYTES))):
        if index not in present:
            data = packed.data[index * CHUNK_BYTES : (index + 1) * CHUNK_BYTES]
            tx.call(op.bundle_put_v1, p_digest=packed.digest, p_size_bytes=len(packed.data), p_index=index, p_data=data)
    entries: list[Mapping[str, Any]] = [
        {"path": e.path, "kind": e.kind, "size": e.size, "mode": e.mode} for e in packed.entries
    ]
    tx.call(op.bundle_seal_v1, p_digest=packed.digest, p_entries=entries)


def create(args: argparse.Namespace) -> int:
    plan = _plan(args)
    packed = None
    if args.bundle is not None:
        from qinglong.wire.bundle import BundleError, pack
        from qinglong.wire.bundle_fetch import BUNDLE_LIMIT_BYTES  # the database's own cap refuses more

        try:
            packed = pack(args.bundle, max_bytes=BUNDLE_LIMIT_BYTES)
        except (BundleError, OSError) as exc:
            raise Failure(f"--bundle {args.bundle}: {exc}") from None
        plan["bundle"] = packed.digest
    try:
        plan = Plan.from_obj(plan).to_obj()  # what is signed is what is stored
    except WireError as exc:
        raise Failure(f"the plan: {exc.message}") from None
    key = signing_key(args.sign)
    if args.schedule is None and (args.timezone is not None or args.overlap is not None):
        raise Failure("--timezone and --overlap go with --schedule")

    def body(tx: Transaction) -> dict[str, Any]:  # the task and its schedule commit together
        project = project_id(tx, args.project)
        if packed is not None:
            _upload(tx, packed)
        signature = None
        if key is not None:
            from qinglong.wire.signing import sign

            signature = sign(key, project, Plan.from_obj(plan)).to_obj()
        new = tx.call(op.task_create_v1, p_project_id=project, p_name=args.name, p_plan=plan,
                      p_plan_signature=signature)  # fmt: skip
        if args.schedule is not None:
            tx.call(op.task_schedule_set_v1, p_project_id=project, p_name=args.name, p_cron=args.schedule,
                    p_timezone=args.timezone or "UTC", p_overlap=args.overlap or "skip")  # fmt: skip
            new["schedule"] = tx.call(op.task_schedule_show_v1, p_project_id=project, p_name=args.name, p_count=5)
        return new

    result = admin_transaction(args, body)
    sentence = f"task {args.name}: {result['status']} {result['taskId']} (revision {result['revisionId']})"
    if packed is not None:
        size = f"{plural(len(packed.entries), 'entry', 'entries')}, {plural(len(packed.data), 'byte')}"
        sentence += f"\nbundle {packed.digest} ({size})"
    if "schedule" in result:
        sentence += "\n" + "\n".join(schedule_lines(f"task {args.name}: schedule set:", result["schedule"]))
    return created(args, result["taskId"], result, sentence)


def list_tasks(args: argparse.Namespace) -> int:
    listed = admin_transaction(args, lambda tx: tx.call(op.task_list_v1, p_project=project_id(tx, args.project)))
    rows = [
        (t["taskId"], t["name"], t["status"], t["pool"], t["argv"], t["schedule"]["cron"] if t["schedule"] else None)
        for t in listed["tasks"]
    ]
    text = table(("ID", "NAME", "STATUS", "POOL", "ARGV", "SCHEDULE"), rows)
    return emit(args, {"projectId": listed["projectId"], "project": listed["project"], "tasks": listed["tasks"]}, text)


def _shown(args: argparse.Namespace, tx: Transaction) -> dict[str, Any]:
    listed = tx.call(op.task_list_v1, p_project=project_id(tx, args.project))
    task = one(listed["tasks"], "name", args.task, "task", "taskId", f"in project {listed['project']}")
    sched = tx.call(op.task_schedule_show_v1, p_project_id=listed["projectId"], p_name=task["name"], p_count=5)
    revision = tx.call(op.task_revision_view_v1, p_revision_id=task["revisionId"])
    return {"projectId": listed["projectId"], "project": listed["project"], **task,
            "schedule": None if sched["status"] == "unscheduled" else sched,
            "planSignature": revision["planSignature"], "bundle": revision["bundle"]}  # fmt: skip


def show(args: argparse.Namespace) -> int:
    shown = admin_transaction(args, functools.partial(_shown, args))
    lines = [
        f"task        {shown['name']} {shown['taskId']}",
        f"project     {shown['project']} {shown['projectId']}",
        f"status      {shown['status']}",
        f"revision    {cell(shown['revisionId'])}",
        f"argv        {json.dumps(shown['argv'])}",
        f"pool        {shown['pool']}",
        f"timeoutMs   {shown['timeoutMs'] or 'none (no timeout)'}",
        f"maxAttempts {shown['maxAttempts'] or '1 (the default: no retry)'}",
        f"signed by   {cell(shown['planSignature'] and shown['planSignature']['keyId'])}",
    ]
    bundle = shown["bundle"]
    if bundle is None:
        lines.append("bundle      -")
    else:
        lines.append(f"bundle      {bundle['digest']} ({plural(bundle['sizeBytes'], 'byte')})")
        lines += [f"  {e['mode']:o} {e['size']:>10} {e['path']}" if e["kind"] == "file" else f"  dir  {e['path']}/"
                  for e in bundle["entries"]]  # fmt: skip
    sched = shown["schedule"]
    if sched is None:
        lines.append("schedule    -")
    else:
        lines.append(f"schedule    {sched['cron']!r} {sched['timezone']}, overlap {sched['overlap']}")
        lines += [f"  next      {n['local']}" for n in sched["next"]]
        lines += [f"  last      {f['local']}  {f['outcome']}" for f in sched["last"]]
    return emit(args, shown, "\n".join(lines))


def set_status(args: argparse.Namespace, active: bool) -> int:
    def body(tx: Transaction) -> dict[str, Any]:
        listed = tx.call(op.task_list_v1, p_project=project_id(tx, args.project))
        task = one(listed["tasks"], "name", args.task, "task", "taskId", f"in project {listed['project']}")
        return tx.call(op.task_status_set_v1, p_project=listed["projectId"], p_task=task["taskId"], p_active=active)

    return status_set(args, admin_transaction(args, body), "task", "taskId")


def register(top: Commands) -> None:
    task = group(top, "task", "tasks, their immutable revisions and their schedules")
    p = task.add_parser("create", help="create a task, or give it a new revision")
    dsn_option(p)
    p.add_argument("--project", type=name, required=True, metavar="NAME|ID", help=PROJECT_HELP)
    p.add_argument("--name", required=True, help="the task's name (a new plan under it is a new revision)")
    p.add_argument("--timeout-ms", type=positive, help="how long one attempt may run (default: no timeout)")
    p.add_argument("--lease-ms", type=positive, help="the Lease length of its Attempts, 1000 to 3600000: how long its "
                   "Worker may lose the control plane (default: its pool's, `qinglong pool lease`)")  # fmt: skip
    p.add_argument("--max-attempts", type=positive, help="attempts of one Run, retries included (default 1: no retry)")
    p.add_argument("--retry-backoff-ms", type=int, help="the wait before a retry (default 0)")
    p.add_argument("--pool", help="only Workers of this pool run it (default: default)")
    p.add_argument(
        "--cwd", help="where it runs: a folder in the Run's own (e.g. one of --bundle's; default: the Run's folder)"
    )
    p.add_argument("--user", metavar="NAME", help="the user it runs as, on the Worker's run_as list (default: the "
                   "Worker's own user; a Worker running as root refuses that unless allow_root_tasks)")  # fmt: skip
    p.add_argument("--group", metavar="NAME", help="the group it runs as, on the Worker's run_as_groups list "
                   "(default: the user's groups)")  # fmt: skip
    p.add_argument(
        "--env", action="append", metavar="NAME=VALUE", help="an environment variable (repeatable; default: none)"
    )
    p.add_argument(
        "--secret-env",
        action="append",
        metavar="NAME=SECRET",
        help="variable NAME gets the project secret SECRET's value at each start (repeatable; default: none)",
    )
    p.add_argument(
        "--secret-file",
        action="append",
        metavar="RELPATH=SECRET",
        help="file RELPATH in the Run's folder (0600) gets the secret's value at each start (repeatable; default: "
        "none)",
    )
    p.add_argument("--bundle", type=Path, metavar="PATH", help="a folder or file packed and shipped with the task "
                   "(unpacked into the Run's folder before it starts; argv and --cwd may name its files; default: "
                   "none)")  # fmt: skip
    p.add_argument("--sign", type=Path, metavar="KEY", default=_plan_key(), help="sign the plan with this operator key "
                   "(qinglong pki plan-key new; default QINGLONG_PLAN_KEY): Workers that require signed plans run "
                   "only those")  # fmt: skip
    p.add_argument(
        "--schedule", metavar="CRON", help="also schedule it: 5 cron fields, e.g. '*/5 * * * *' (default: no schedule)"
    )
    p.add_argument("--timezone", help="with --schedule: the IANA time zone its fields are read in (default UTC)")
    p.add_argument("--overlap", choices=("skip", "allow"), help="with --schedule: while a Run is live (default skip)")
    p.add_argument("argv", nargs="+", help="the command, after --")
    creating_options(p)
    p.set_defaults(handler=create)
    add_schedule(task)
    p = catalogue_command(task, "list", "a Project's tasks: pool, argv, schedule", list_tasks)
    p.add_argument("--project", required=True, metavar="NAME|ID", help=PROJECT_HELP)
    p = catalogue_command(task, "show", "a task: its current revision's plan and its schedule", show)
    p.add_argument("--project", required=True, metavar="NAME|ID", help=PROJECT_HELP)
    p.add_argument("task", metavar="NAME|ID", help="the task, by name, id or short id within the project")
    for command, active, text in (
        ("disable", False, "disable a task: neither users nor the scheduler queue its Runs"),
        ("enable", True, "enable a disabled task"),
    ):
        p = catalogue_command(task, command, text, functools.partial(set_status, active=active))
        p.add_argument("--project", required=True, metavar="NAME|ID", help=PROJECT_HELP)
        p.add_argument("task", metavar="NAME|ID", help="the task, by name, id or short id within the project")
    add_api_commands(task, _plan, signing_key, _plan_key())
