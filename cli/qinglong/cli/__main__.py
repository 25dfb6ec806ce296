"""`qinglong`: the operator's command line. Every command prints one line on failure and exits
non-zero — 2 for bad usage or input (including a refused request), 3 when a service it needs is
unreachable — never a traceback. `qinglong <group> <command> --help` documents each one.
Touches what each command says: the database (DBA connection from --dsn or QINGLONG_DSN), the
shell's user API (--api, --token-file, --ca), files it is pointed at, local processes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import secrets
import subprocess
import sys
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from qinglong.db import sqitch
from qinglong.wire.common import RUN_STATUSES
from qinglong.wire.specs import BEARER_TOKEN_PATTERN

EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3


class Failure(Exception):
    """A one-line reason and an exit code."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


def _dsn(args: argparse.Namespace) -> str:
    dsn = args.dsn or os.environ.get("QINGLONG_DSN")
    if not dsn:
        raise Failure("no database: pass --dsn or set QINGLONG_DSN")
    return str(dsn)


def _admin(args: argparse.Namespace, function: str, *params: Any) -> dict[str, Any]:
    """One operator call in its own transaction."""
    return _admin_transaction(args, lambda tx: tx.call(function, *params))


def _admin_transaction(args: argparse.Namespace, body: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    """Operator calls that commit together; refusals and faults become one-line failures."""
    from qinglong.cli.admin import Refused, Unavailable, transaction

    try:
        with transaction(_dsn(args)) as tx:
            return body(tx)
    except Unavailable as exc:
        raise Failure(f"database unreachable: {exc}", EXIT_UNAVAILABLE) from None
    except Refused as exc:
        raise Failure(str(exc)) from None


def _api(args: argparse.Namespace) -> Any:
    from qinglong.cli.api import UserApi

    token = os.environ.get("QINGLONG_TOKEN") or (args.token_file.read_text().strip() if args.token_file else "")
    if not args.api or not token or not args.ca:
        raise Failure("the user API needs --api, --ca and --token-file (or QINGLONG_TOKEN)")
    if not re.fullmatch(BEARER_TOKEN_PATTERN, token):
        raise Failure(
            "the token (--token-file or QINGLONG_TOKEN) is not a bearer token: 16 to 512 of A-Z a-z 0-9 . _ ~ + / -"
        )
    return UserApi(args.api.rstrip("/"), token, args.ca)


def _user_call(call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    from qinglong.cli.api import ApiError, BadCa, Unreachable

    try:
        return call()
    except BadCa as exc:
        raise Failure(str(exc)) from None
    except ApiError as exc:
        raise Failure(f"refused: {exc.status} {exc.code}") from None
    except Unreachable as exc:
        raise Failure(f"shell unreachable: {exc}", EXIT_UNAVAILABLE) from None


def _uuid(text: str) -> str:
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a uuid: {text}") from None


def _positive(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a positive integer: {text}")
    return int(text)


# -- commands ---------------------------------------------------------------------------------


def cmd_db(args: argparse.Namespace) -> int:
    target = args.target or os.environ.get("QINGLONG_DB_TARGET")
    if not target:
        raise Failure("no sqitch target: pass --target db:pg://user@host:port/db or set QINGLONG_DB_TARGET")
    to = getattr(args, "to", None)
    extra = (["-y"] if args.command == "revert" else []) + (["--to", to] if to else [])
    out = subprocess.run(sqitch(args.command, *extra, target), capture_output=True, text=True)
    if out.returncode != 0:
        lines = [line for line in (out.stderr or out.stdout).splitlines() if line.strip()]
        raise Failure(f"sqitch {args.command} failed: {lines[-1] if lines else out.returncode}")
    if args.command == "status":
        print(out.stdout.rstrip())
    else:
        print(f"sqitch {args.command}{f' --to {to}' if to else ''}: ok ({target})")
    return 0


def cmd_pki_init(args: argparse.Namespace) -> int:
    from qinglong.cli import pki

    pki.init_ca(args.dir)
    issued = pki.issue_server(args.dir, args.host)
    print(f"CA and server certificate for {', '.join(args.host)} in {args.dir} ({issued.certificate.name})")
    return 0


def cmd_worker_enroll(args: argparse.Namespace) -> int:
    from qinglong.cli import pki

    if not (args.pki / "ca.key").is_file():
        raise Failure(f"no CA in {args.pki}: run `qinglong pki init` first")
    worker_id = args.id or str(uuid.uuid4())
    pending = pki.issue_worker(args.pki, worker_id, name=f"worker-{worker_id}.pending")
    try:
        result = _admin(args, "worker_enroll_v1", worker_id, args.name, args.pool, pending.fingerprint)
    except Failure:
        pending.certificate.unlink(missing_ok=True)
        pending.key.unlink(missing_ok=True)
        raise  # the enrolled certificate (if any) stays untouched
    issued = pki.Issued(
        pending.certificate.rename(args.pki / f"worker-{worker_id}.crt"),
        pending.key.rename(args.pki / f"worker-{worker_id}.key"),
        pending.fingerprint,
    )
    print(
        f"{result['status']} worker {worker_id} generation {result['generation']}: {issued.certificate}, {issued.key}"
    )
    return 0


def cmd_project_create(args: argparse.Namespace) -> int:
    result = _admin(args, "project_create_v1", args.name)
    print(f"project {args.name}: {result['status']} {result['projectId']}")
    return 0


def cmd_subject_create(args: argparse.Namespace) -> int:
    from qinglong.cli.api import token_digest

    token = secrets.token_urlsafe(32)

    def create(tx: Any) -> dict[str, Any]:  # the subject and its binding commit together
        created: dict[str, Any] = tx.call("subject_create_v1", args.kind, args.name, token_digest(token))
        if args.project:
            tx.call("role_binding_set_v1", args.project, created["subjectId"], args.role, True)
        return created

    result = _admin_transaction(args, create)
    args.token_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(args.token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # also when the file existed with a looser mode
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    print(f"subject {args.name} ({args.kind}) {result['subjectId']}: bearer token written to {args.token_file}")
    return 0


def cmd_task_create(args: argparse.Namespace) -> int:
    plan: dict[str, Any] = {"argv": args.argv}
    if args.timeout_ms is not None:
        plan["timeoutMs"] = args.timeout_ms
    if args.max_attempts is not None:
        plan["maxAttempts"] = args.max_attempts
    if args.retry_backoff_ms is not None:
        plan["retryBackoffMs"] = args.retry_backoff_ms
    if args.pool:
        plan["pool"] = args.pool
    if args.env:
        pairs = [e.split("=", 1) for e in args.env]
        if any(len(p) != 2 or not p[0] for p in pairs):
            raise Failure("--env takes NAME=VALUE")
        plan["env"] = dict(pairs)
    if args.schedule is None and (args.timezone is not None or args.overlap is not None):
        raise Failure("--timezone and --overlap go with --schedule")

    def create(tx: Any) -> dict[str, Any]:  # the task and its schedule commit together
        created: dict[str, Any] = tx.call("task_create_v1", args.project, args.name, plan)
        if args.schedule is not None:
            tx.call("task_schedule_set_v1", args.project, args.name, args.schedule, args.timezone or "UTC",
                    args.overlap or "skip")  # fmt: skip
            created["schedule"] = tx.call("task_schedule_show_v1", args.project, args.name, 5)
        return created

    result = _admin_transaction(args, create)
    print(f"task {args.name}: {result['status']} {result['taskId']} (revision {result['revisionId']})")
    if "schedule" in result:
        print("\n".join(_schedule_lines(f"task {args.name}: schedule set:", result["schedule"])))
    return 0


def _schedule_lines(heading: str, shown: dict[str, Any]) -> list[str]:
    """A schedule as task_schedule_show_v1 answers it: the definition, the next and the last fire times (local)."""
    lines = [f"{heading} {shown['cron']!r} {shown['timezone']}, overlap {shown['overlap']}"]
    lines += [f"  next  {n['local']}" for n in shown["next"]]
    for f in shown["last"]:
        what = {
            "enqueued": f"run {f['runId']}",
            "skipped_overlap": f"while run {f['blockingRunId']} was not terminal",
            "skipped_inactive": "the project is archived or the task has no revision",
        }[f["outcome"]]
        lines.append(f"  last  {f['local']}  {f['outcome']}  {what}{'  (caught up)' if f['caughtUp'] else ''}")
    return lines


def cmd_task_schedule(args: argparse.Namespace) -> int:
    def body(tx: Any) -> dict[str, Any]:  # a change and the schedule it leaves, in one transaction
        changed: dict[str, Any] = {}
        if not args.show:
            changed = tx.call("task_schedule_set_v1", args.project, args.name, args.cron, args.timezone, args.overlap)
        return {"changed": changed, "shown": tx.call("task_schedule_show_v1", args.project, args.name, args.count)}

    result = _admin_transaction(args, body)
    changed, shown = result["changed"], result["shown"]
    if shown["status"] == "unscheduled":
        verb = f"schedule {changed['status']}, " if changed else ""
        print(f"task {args.name}: {verb}no schedule")
    else:
        heading = f"task {args.name}: schedule {changed['status']}:" if changed else f"task {args.name}:"
        print("\n".join(_schedule_lines(heading, shown)))
    return 0


def cmd_run_enqueue(args: argparse.Namespace) -> int:
    api = _api(args)
    result = _user_call(lambda: api.enqueue(args.project, args.task))
    print(f"run {result['runId']}: {result['status']}")
    return 0


def cmd_run_cancel(args: argparse.Namespace) -> int:
    api = _api(args)
    result = _user_call(lambda: api.cancel(args.project, args.run))
    print(f"run {args.run}: {result['status']} (status {result['runStatus']})")
    return 0


def cmd_run_show(args: argparse.Namespace) -> int:
    from qinglong.cli.timeline import render

    api = _api(args)
    timeline = _user_call(lambda: api.show(args.project, args.run))
    print(json.dumps(timeline, indent=2) if args.json else render(timeline))
    return 0


def _instant_ms(text: str) -> int:
    """An ISO 8601 date or date-time as ms since the epoch; one without a UTC offset is UTC."""
    try:
        at = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 date or date-time: {text}") from None
    at = at if at.tzinfo is not None else at.replace(tzinfo=dt.UTC)
    return (at - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(milliseconds=1)


def cmd_run_list(args: argparse.Namespace) -> int:
    from qinglong.cli.timeline import render_runs
    from qinglong.wire import RunListQuery, WireError

    try:
        query = RunListQuery(
            task_id=args.task, status=args.status, since_ms=args.since, until_ms=args.until, limit=args.limit,
            cursor=args.cursor,
        )  # fmt: skip
    except WireError as exc:
        raise Failure(f"bad filter: {exc.message}") from None
    api = _api(args)
    page = _user_call(lambda: api.list_runs(args.project, query.to_query()))
    print(json.dumps(page, indent=2) if args.json else render_runs(page))
    return 0


def cmd_converge(args: argparse.Namespace) -> int:
    from qinglong.cli.admin import Refused, Unavailable, converge_once

    if not args.once:
        raise Failure("only --once is supported: pg_cron (or your scheduler) owns the cadence")
    try:
        converge_once(_dsn(args), args.page_size, args.max_pages, args.grace_ms)
    except Unavailable as exc:
        raise Failure(f"database unreachable: {exc}", EXIT_UNAVAILABLE) from None
    except Refused as exc:
        raise Failure(f"converge refused: {exc}") from None
    print("one convergence cycle done")
    return 0


def cmd_shell_serve(args: argparse.Namespace) -> int:
    from qinglong.shell.config import ConfigError
    from qinglong.shell.serve import main as serve

    try:
        serve(args.config)
    except ConfigError as exc:
        raise Failure(str(exc)) from None
    except OSError as exc:
        raise Failure(f"cannot listen: {exc.strerror or exc}", EXIT_UNAVAILABLE) from None
    return 0


def cmd_worker_run(args: argparse.Namespace) -> int:
    from qinglong.worker.run import main as worker_main

    return worker_main(["run", "--config", str(args.config)])


# -- parser -----------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit 2), like every other failure."""

    def error(self, message: str) -> Any:
        print(f"{self.prog}: {message} (see --help)", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def parser() -> argparse.ArgumentParser:
    top = _Parser(prog="qinglong", description="Qinglong remote worker control: operator commands")
    groups = top.add_subparsers(dest="group", required=True, parser_class=_Parser)

    def group(name: str, text: str) -> Any:
        return groups.add_parser(name, help=text).add_subparsers(dest="command", required=True, parser_class=_Parser)

    def dsn(p: argparse.ArgumentParser) -> None:
        p.add_argument("--dsn", help="DBA connection string (default: QINGLONG_DSN)")

    def api(p: argparse.ArgumentParser) -> None:
        p.add_argument("--api", help="user API origin, https://host:port")
        p.add_argument("--ca", type=Path, help="CA certificate that signed the shell's certificate")
        p.add_argument("--token-file", type=Path, help="file holding your bearer token (or QINGLONG_TOKEN)")
        p.add_argument("--project", type=_uuid, required=True, help="project id")

    db = group("db", "deploy, verify, revert or inspect the schema with sqitch (the installed plan)")
    for name, text in (
        ("deploy", "deploy what the database lacks (--to a release tag: no further)"),
        ("verify", "run every deployed change's verify script"),
        ("revert", "revert to a release tag (--to @vX.Y.Z), or everything"),
        ("status", "what is deployed, and what the installed plan would add"),
    ):
        p = db.add_parser(name, help=text)
        p.add_argument("--target", help="sqitch target db:pg://… (default: QINGLONG_DB_TARGET)")
        if name in ("deploy", "revert"):
            p.add_argument("--to", metavar="@TAG", help="a change or tag of the plan, e.g. @v0.1.0")
        p.set_defaults(handler=cmd_db)

    pki = group("pki", "the deployment's private PKI")
    p = pki.add_parser("init", help="create a CA and the shell's server certificate")
    p.add_argument("--dir", type=Path, required=True, help="folder for ca.crt/ca.key/server.crt/server.key")
    p.add_argument("--host", action="append", required=True, help="server DNS name or IP (repeatable)")
    p.set_defaults(handler=cmd_pki_init)

    worker = group("worker", "enrol and run Workers")
    p = worker.add_parser("enroll", help="issue a client certificate and enrol (or re-enrol) a Worker")
    dsn(p)
    p.add_argument("--pki", type=Path, required=True, help="the folder of `qinglong pki init`")
    p.add_argument("--name", required=True)
    p.add_argument("--pool", default="default")
    p.add_argument("--id", type=_uuid, help="re-enrol this Worker id (bumps its generation)")
    p.set_defaults(handler=cmd_worker_enroll)
    p = worker.add_parser("run", help="run a Worker until SIGTERM")
    p.add_argument("--config", type=Path, required=True, help="TOML file (see qinglong.worker.run)")
    p.set_defaults(handler=cmd_worker_run)

    project = group("project", "projects")
    p = project.add_parser("create", help="create a project (idempotent by name)")
    dsn(p)
    p.add_argument("name")
    p.set_defaults(handler=cmd_project_create)

    subject = group("subject", "users and agents of the user API")
    p = subject.add_parser("create", help="create a subject, write its new bearer token to a 0600 file")
    dsn(p)
    p.add_argument("--kind", choices=("user", "agent"), default="user")
    p.add_argument("--name", required=True)
    p.add_argument("--token-file", type=Path, required=True)
    p.add_argument("--project", type=_uuid, help="bind to this project…")
    p.add_argument("--role", choices=("owner", "admin", "operator", "viewer"), default="operator", help="…as")
    p.set_defaults(handler=cmd_subject_create)

    task = group("task", "tasks, their immutable revisions and their schedules")
    p = task.add_parser("create", help="create a task, or give it a new revision")
    dsn(p)
    p.add_argument("--project", type=_uuid, required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--timeout-ms", type=_positive)
    p.add_argument("--max-attempts", type=_positive)
    p.add_argument("--retry-backoff-ms", type=int)
    p.add_argument("--pool")
    p.add_argument("--env", action="append", metavar="NAME=VALUE")
    p.add_argument("--schedule", metavar="CRON", help="also schedule it: 5 cron fields, e.g. '*/5 * * * *'")
    p.add_argument("--timezone", help="with --schedule: the IANA time zone its fields are read in (default UTC)")
    p.add_argument("--overlap", choices=("skip", "allow"), help="with --schedule: while a Run is live (default skip)")
    p.add_argument("argv", nargs="+", help="the command, after --")
    p.set_defaults(handler=cmd_task_create)
    p = task.add_parser("schedule", help="set, clear or show a task's schedule and its next fire times")
    dsn(p)
    p.add_argument("--project", type=_uuid, required=True)
    p.add_argument("--name", required=True, help="the task's name")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--cron", help="set it: 5 cron fields (minute hour day-of-month month day-of-week) or @daily …")
    what.add_argument("--clear", action="store_true", help="remove the schedule")
    what.add_argument("--show", action="store_true", help="print it, its next and its last fire times")
    p.add_argument("--timezone", default="UTC", help="the IANA time zone the fields are read in (default UTC)")
    p.add_argument("--overlap", choices=("skip", "allow"), default="skip",
                   help="skip (default) or allow a fire time while a Run of the task is not terminal")  # fmt: skip
    p.add_argument("--count", type=_positive, default=5, help="how many next and last fire times to print (1..100)")
    p.set_defaults(handler=cmd_task_schedule)

    run = group("run", "Runs, through the user API")
    p = run.add_parser("enqueue", help="queue a Run of a task")
    api(p)
    p.add_argument("--task", type=_uuid, required=True)
    p.set_defaults(handler=cmd_run_enqueue)
    p = run.add_parser("cancel", help="ask to cancel a Run (reason user)")
    api(p)
    p.add_argument("--run", type=_uuid, required=True)
    p.set_defaults(handler=cmd_run_cancel)
    p = run.add_parser("show", help="a Run's event timeline")
    api(p)
    p.add_argument("--run", type=_uuid, required=True)
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_run_show)
    p = run.add_parser("list", help="a project's Runs, newest first, one page at a time")
    api(p)
    p.add_argument("--task", type=_uuid, help="only this task's Runs")
    p.add_argument("--status", choices=RUN_STATUSES, help="only Runs in this status")
    p.add_argument("--since", type=_instant_ms, metavar="ISO", help="created at or after (no offset: UTC)")
    p.add_argument("--until", type=_instant_ms, metavar="ISO", help="created before (no offset: UTC)")
    p.add_argument("--limit", type=_positive, help="Runs per page, at most 100 (default 50)")
    p.add_argument("--cursor", help="the next page: the cursor the previous page printed")
    p.add_argument("--json", action="store_true", help="the page as one JSON document (qinglong/run-list@v1)")
    p.set_defaults(handler=cmd_run_list)

    p = groups.add_parser("converge", help="one convergence cycle (what pg_cron runs every minute)")
    dsn(p)
    p.add_argument("--once", action="store_true", required=True)
    p.add_argument("--page-size", type=_positive, default=64)
    p.add_argument("--max-pages", type=_positive, default=16)
    p.add_argument("--grace-ms", type=int, default=30000)
    p.set_defaults(handler=cmd_converge)

    shell = group("shell", "the HTTPS shell")
    p = shell.add_parser("serve", help="serve the worker ingress, user API and admin listeners")
    p.add_argument("--config", type=Path, required=True, help="TOML file (see qinglong.shell.config)")
    p.set_defaults(handler=cmd_shell_serve)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        code: int = args.handler(args)
    except Failure as failure:
        print(f"qinglong: {failure}", file=sys.stderr)
        return failure.code
    except OSError as exc:
        print(f"qinglong: {exc.strerror or exc}: {getattr(exc, 'filename', '') or ''}".rstrip(": "), file=sys.stderr)
        return EXIT_USAGE
    return code


if __name__ == "__main__":
    sys.exit(main())
