"""`qinglong`: the operator's command line. Every command prints one line on failure and exits
non-zero — 2 for bad usage or input (including a refused request or a TLS certificate that does not
verify), 3 when a service it needs is unreachable — never a traceback. A reader that goes away (`| head`)
ends it quietly with 141, as SIGPIPE ends other Unix tools. `qinglong <group> <command> --help` documents
each one. A creating command prints the new id alone on stdout (so `X=$(qinglong … create …)` works;
--verbose adds a sentence on stderr); --json prints the answer as one JSON document.
Touches what each command says: the database (DBA connection from --dsn or QINGLONG_DSN), the
shell's user API (--api, --ca, --token-file, else QINGLONG_API, QINGLONG_CA, QINGLONG_TOKEN_FILE or
QINGLONG_TOKEN, else the client profile: $QINGLONG_CONFIG or ~/.config/qinglong/client.toml), files it is
pointed at (it replaces none unless --force), local processes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
import tomllib
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from qinglong.cli import catalogue
from qinglong.db import sqitch
from qinglong.wire.codec import WireError
from qinglong.wire.common import NAME_PATTERN, RUN_STATUSES
from qinglong.wire.fields import Record, Str, wire
from qinglong.wire.specs import BEARER_TOKEN_PATTERN

EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3
EXIT_BROKEN_PIPE = 128 + 13  # what a shell reports for a process SIGPIPE ended


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


class _ClientFile(Record):
    """client.toml exactly (the wire contracts' field engine): an unknown key is refused, naming it.
    Relative paths are relative to the file."""

    api: str | None = wire(Str(2048, min_len=1), name="api", optional=True, default=None)
    ca: str | None = wire(Str(4096, min_len=1), name="ca", optional=True, default=None)
    token_file: str | None = wire(Str(4096, min_len=1), name="token_file", optional=True, default=None)


def _profile() -> dict[str, Any]:
    """The client profile: $QINGLONG_CONFIG (which must exist), else ~/.config/qinglong/client.toml if it exists."""
    named = os.environ.get("QINGLONG_CONFIG")
    path = Path(named) if named else Path.home() / ".config" / "qinglong" / "client.toml"
    if not named and not path.is_file():
        return {}
    try:
        given = _ClientFile.load_at(tomllib.loads(path.read_text()), path.name)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise Failure(f"cannot read the client profile {path}: {getattr(exc, 'strerror', None) or exc}") from None
    except WireError as exc:
        raise Failure(f"client profile: {exc.message}") from None
    return {
        "api": given.api,
        "ca": given.ca and path.parent / given.ca,
        "token_file": given.token_file and path.parent / given.token_file,
    }


def _api(args: argparse.Namespace) -> Any:
    """The user API client: each of --api, --ca, --token-file, else its QINGLONG_* variable, else the profile."""
    from qinglong.cli.api import UserApi

    env = os.environ.get
    fixed = {"api": args.api or env("QINGLONG_API"), "ca": args.ca or env("QINGLONG_CA")}
    fixed["token_file"] = args.token_file or env("QINGLONG_TOKEN_FILE")
    token = "" if args.token_file else env("QINGLONG_TOKEN", "")  # an explicit --token-file wins
    if not all(fixed.values()) and not (token and fixed["api"] and fixed["ca"]):
        profile = _profile()
        fixed = {k: v or profile.get(k) for k, v in fixed.items()}
    if not token and fixed["token_file"]:
        token = Path(fixed["token_file"]).read_text().strip()
    if not fixed["api"] or not token or not fixed["ca"]:
        raise Failure("the user API needs --api, --ca and --token-file (or QINGLONG_TOKEN)")
    if not re.fullmatch(BEARER_TOKEN_PATTERN, token):
        raise Failure(
            "the token (--token-file or QINGLONG_TOKEN) is not a bearer token: 16 to 512 of A-Z a-z 0-9 . _ ~ + / -"
        )
    return UserApi(str(fixed["api"]).rstrip("/"), token, Path(fixed["ca"]))


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


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def _name(text: str) -> str:
    """A project's or task's name, or an id (a name has the form of ql.projects.name and ql.tasks.name)."""
    if not re.fullmatch(NAME_PATTERN, text):
        raise argparse.ArgumentTypeError(f"not a name or id: {text!r}")
    return text


def _positive(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a positive integer: {text}")
    return int(text)


def _created(args: argparse.Namespace, new_id: str, answer: dict[str, Any], sentence: str) -> int:
    """What a creating command prints: the answer as JSON (--json), else the new id alone; --verbose: the sentence
    on stderr."""
    print(json.dumps(answer, indent=2) if args.json else new_id)
    if args.verbose:
        print(sentence, file=sys.stderr)
    return 0


def _write_new(path: Path, text: str, force: bool) -> None:
    """`text` in a new 0600 file at `path`, atomically: a complete file or none. An existing file stays (refused)
    unless `force`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mkstemp: mode 0600
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if force:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)  # fails if path exists: no window in which another file is replaced
            except FileExistsError:
                raise Failure(f"{path} exists: pass --force to replace it") from None
    finally:
        Path(tmp).unlink(missing_ok=True)


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

    present = [name for name in ("ca.crt", "ca.key") if (args.dir / name).exists()]
    if present and not args.force:
        raise Failure(f"{args.dir} already holds a CA ({', '.join(present)}): pass --force to replace it")
    pki.init_ca(args.dir)
    issued = pki.issue_server(args.dir, args.host)
    print(f"CA and server certificate for {', '.join(args.host)} in {args.dir} ({issued.certificate.name})")
    return 0


def _issue_and_record(
    args: argparse.Namespace, worker_id: Callable[[Any], str], record: Callable[[Any, str, Any], dict[str, Any]]
) -> tuple[dict[str, Any], Any]:
    """Issue a Worker certificate into pending files and record it in one operator transaction; only once it has
    committed do the files become worker-<id>.crt/.key (each replaced by one rename). A refusal removes the
    pending files and leaves the installed ones untouched."""
    from qinglong.cli import pki

    if not (args.pki / "ca.key").is_file():
        raise Failure(f"no CA in {args.pki}: run `qinglong pki init` first")
    pending: list[pki.Issued] = []

    def body(tx: Any) -> dict[str, Any]:
        wid = worker_id(tx)
        pending.append(pki.issue_worker(args.pki, wid, name=f"worker-{wid}.pending"))
        return {**record(tx, wid, pending[0]), "workerId": wid}

    try:
        result = _admin_transaction(args, body)
    except Failure:
        for issued in pending:
            issued.certificate.unlink(missing_ok=True)
            issued.key.unlink(missing_ok=True)
        raise
    new = pending[0]
    wid = result["workerId"]
    issued = pki.Issued(
        new.certificate.rename(args.pki / f"worker-{wid}.crt"),
        new.key.rename(args.pki / f"worker-{wid}.key"),
        new.fingerprint,
        new.not_after_ms,
    )
    return result, issued


def cmd_worker_enroll(args: argparse.Namespace) -> int:
    def record(tx: Any, wid: str, issued: Any) -> dict[str, Any]:
        result: dict[str, Any] = tx.call("worker_enroll_v1", wid, args.name, args.pool, issued.fingerprint)
        tx.call("worker_certificate_renew_v1", wid, issued.fingerprint, issued.not_after_ms)  # records its expiry
        return result

    worker_id = args.id or str(uuid.uuid4())
    result, issued = _issue_and_record(args, lambda tx: worker_id, record)
    answer = {**result, "certificate": str(issued.certificate), "key": str(issued.key)}
    sentence = (
        f"{result['status']} worker {worker_id} generation {result['generation']}: {issued.certificate}, {issued.key}"
    )
    return _created(args, worker_id, answer, sentence)


def cmd_worker_renew(args: argparse.Namespace) -> int:
    result, issued = _issue_and_record(
        args,
        lambda tx: catalogue.worker_id(tx, args.worker),
        lambda tx, wid, new: tx.call("worker_certificate_renew_v1", wid, new.fingerprint, new.not_after_ms),
    )
    expires = dt.datetime.fromtimestamp(issued.not_after_ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    answer = {**result, "certificate": str(issued.certificate), "key": str(issued.key)}
    sentence = (
        f"renewed worker {result['workerId']} generation {result['generation']}, expires {expires}: "
        f"{issued.certificate}, {issued.key} (install both on the Worker; no restart)"
    )
    return _created(args, result["workerId"], answer, sentence)


def cmd_project_create(args: argparse.Namespace) -> int:
    result = _admin(args, "project_create_v1", args.name)
    return _created(args, result["projectId"], result, f"project {args.name}: {result['status']} {result['projectId']}")


def cmd_subject_create(args: argparse.Namespace) -> int:
    from qinglong.wire.common import token_digest

    if args.role and not args.project:
        raise Failure("--role goes with --project (the project to bind the subject to)")
    if args.token_file.exists() and not args.force:
        raise Failure(f"{args.token_file} exists: pass --force to replace it")
    _dsn(args)  # no database: refused before any file is written
    token = secrets.token_urlsafe(32)

    def create(tx: Any) -> dict[str, Any]:  # the subject, its binding and its token file: all or nothing
        created: dict[str, Any] = tx.call("subject_create_v1", args.kind, args.name, token_digest(token))
        if args.project:
            project = catalogue.project_id(tx, args.project)
            tx.call("role_binding_set_v1", project, created["subjectId"], args.role or "operator", True)
        _write_new(args.token_file, token + "\n", args.force)  # before the commit: a refused write rolls back
        return created

    result = _admin_transaction(args, create)
    sentence = f"subject {args.name} ({args.kind}) {result['subjectId']}: bearer token written to {args.token_file}"
    return _created(args, result["subjectId"], result, sentence)


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
        project = catalogue.project_id(tx, args.project)
        created: dict[str, Any] = tx.call("task_create_v1", project, args.name, plan)
        if args.schedule is not None:
            tx.call("task_schedule_set_v1", project, args.name, args.schedule, args.timezone or "UTC",
                    args.overlap or "skip")  # fmt: skip
            created["schedule"] = tx.call("task_schedule_show_v1", project, args.name, 5)
        return created

    result = _admin_transaction(args, create)
    sentence = f"task {args.name}: {result['status']} {result['taskId']} (revision {result['revisionId']})"
    if "schedule" in result:
        sentence += "\n" + "\n".join(_schedule_lines(f"task {args.name}: schedule set:", result["schedule"]))
    return _created(args, result["taskId"], result, sentence)


def _schedule_lines(heading: str, shown: dict[str, Any]) -> list[str]:
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


def cmd_task_schedule(args: argparse.Namespace) -> int:
    def body(tx: Any) -> dict[str, Any]:  # a change and the schedule it leaves, in one transaction
        changed: dict[str, Any] = {}
        project = catalogue.project_id(tx, args.project)
        if not args.show:
            changed = tx.call("task_schedule_set_v1", project, args.name, args.cron, args.timezone, args.overlap)
        return {"changed": changed, "shown": tx.call("task_schedule_show_v1", project, args.name, args.count)}

    result = _admin_transaction(args, body)
    changed, shown = result["changed"], result["shown"]
    if args.json:
        print(json.dumps(result, indent=2))
    elif shown["status"] == "unscheduled":
        verb = f"schedule {changed['status']}, " if changed else ""
        print(f"task {args.name}: {verb}no schedule")
    else:
        heading = f"task {args.name}: schedule {changed['status']}:" if changed else f"task {args.name}:"
        print("\n".join(_schedule_lines(heading, shown)))
    return 0


def _task_id(api: Any, project: str, task: str | None) -> str | None:
    """A task named by its id, or by its name within the project (one call to the project's task list)."""
    if task is None or _is_uuid(task):
        return task
    listed = _user_call(lambda: api.tasks(project))
    found = [t["taskId"] for t in listed["tasks"] if t["name"] == task]
    if not found:
        raise Failure(f"no task {task!r} in project {project}")
    return str(found[0])


def cmd_run_enqueue(args: argparse.Namespace) -> int:
    api = _api(args)
    task = _task_id(api, args.project, args.task)
    result = _user_call(lambda: api.enqueue(args.project, task))
    return _created(args, result["runId"], result, f"run {result['runId']}: {result['status']}")


def cmd_run_cancel(args: argparse.Namespace) -> int:
    api = _api(args)
    result = _user_call(lambda: api.cancel(args.project, args.run))
    print(
        json.dumps(result, indent=2)
        if args.json
        else f"run {args.run}: {result['status']} (status {result['runStatus']})"
    )
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

    api = _api(args)
    try:
        query = RunListQuery(
            task_id=_task_id(api, args.project, args.task), status=args.status, since_ms=args.since,
            until_ms=args.until, limit=args.limit, cursor=args.cursor,
        )  # fmt: skip
    except WireError as exc:
        raise Failure(f"bad filter: {exc.message}") from None
    page = _user_call(lambda: api.list_runs(args.project, query.to_query()))
    if args.ids:
        print("\n".join(r["runId"] for r in page["runs"]))
    else:
        print(json.dumps(page, indent=2) if args.json else render_runs(page))
    return 0


def cmd_run_logs(args: argparse.Namespace) -> int:
    from qinglong.cli.output import print_logs
    from qinglong.wire import RunOutputQuery

    api = _api(args)

    def fetch(attempt: int | None, after: int | None) -> dict[str, Any]:
        query = RunOutputQuery(attempt=attempt, after=after).to_query()
        return _user_call(lambda: api.output(args.project, args.run, query))

    print_logs(fetch, args.attempt, args.follow, args.json)
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
        return serve(args.config)
    except ConfigError as exc:
        raise Failure(str(exc)) from None
    except OSError as exc:
        raise Failure(f"cannot listen: {exc.strerror or exc}", EXIT_UNAVAILABLE) from None


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
    try:
        version = importlib.metadata.version("qinglong-control")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown (not installed)"
    top.add_argument("--version", action="version", version=f"qinglong {version}", help="print the version and exit")
    groups = top.add_subparsers(dest="group", required=True, parser_class=_Parser)

    def group(name: str, text: str) -> Any:
        return groups.add_parser(name, help=text).add_subparsers(dest="command", required=True, parser_class=_Parser)

    def dsn(p: argparse.ArgumentParser) -> None:
        p.add_argument("--dsn", help="DBA connection string (default: QINGLONG_DSN)")

    def api(p: argparse.ArgumentParser) -> None:
        p.add_argument("--api", help="user API origin, https://host:port (default: QINGLONG_API, then the profile)")
        p.add_argument("--ca", type=Path, help="CA certificate that signed the shell's certificate (QINGLONG_CA)")
        p.add_argument("--token-file", type=Path, help="file holding your bearer token (QINGLONG_TOKEN_FILE)")
        p.add_argument("--project", type=_name, required=True, metavar="NAME|ID", help="the project, by name or id")
        p.add_argument("--json", action="store_true", help="print the answer as one JSON document")

    def creating(p: argparse.ArgumentParser) -> None:
        p.add_argument("--json", action="store_true", help="print the answer as one JSON document, not the id")
        p.add_argument("--verbose", action="store_true", help="also print a sentence on stderr")

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
    p.add_argument("--force", action="store_true", help="replace a CA the folder already holds")
    p.set_defaults(handler=cmd_pki_init)

    worker = group("worker", "enrol and run Workers")
    p = worker.add_parser("enroll", help="issue a client certificate and enrol (or re-enrol) a Worker")
    dsn(p)
    p.add_argument("--pki", type=Path, required=True, help="the folder of `qinglong pki init`")
    p.add_argument("--name", required=True, help="a name for people (1 to 200 characters)")
    p.add_argument("--pool", default="default", help="the pool it takes Runs of (default: default)")
    p.add_argument("--id", type=_uuid, help="re-enrol this Worker id (bumps its generation)")
    creating(p)
    p.set_defaults(handler=cmd_worker_enroll)
    p = worker.add_parser(
        "renew", help="issue a new client certificate for a Worker, same generation (its tasks go on; no restart)"
    )
    dsn(p)
    p.add_argument("--pki", type=Path, required=True, help="the folder of `qinglong pki init`")
    p.add_argument("worker", metavar="NAME|ID", help="the Worker, by name or id")
    creating(p)
    p.set_defaults(handler=cmd_worker_renew)
    p = worker.add_parser("run", help="run a Worker until SIGTERM")
    p.add_argument("--config", type=Path, required=True, help="TOML file (see qinglong.worker.run)")
    p.set_defaults(handler=cmd_worker_run)

    project = group("project", "projects")
    p = project.add_parser("create", help="create a project (idempotent by name)")
    dsn(p)
    p.add_argument("name", help="the project's name")
    creating(p)
    p.set_defaults(handler=cmd_project_create)

    subject = group("subject", "users and agents of the user API")
    p = subject.add_parser("create", help="create a subject, write its new bearer token to a 0600 file")
    dsn(p)
    p.add_argument("--kind", choices=("user", "agent"), default="user", help="a person or a program (default user)")
    p.add_argument("--name", required=True, help="the subject's name")
    p.add_argument("--token-file", type=Path, required=True, help="the new 0600 file for its bearer token")
    p.add_argument("--force", action="store_true", help="replace an existing token file")
    p.add_argument("--project", type=_name, metavar="NAME|ID", help="bind it to this project…")
    p.add_argument("--role", choices=("owner", "admin", "operator", "viewer"), help="…as (default operator)")
    creating(p)
    p.set_defaults(handler=cmd_subject_create)

    task = group("task", "tasks, their immutable revisions and their schedules")
    p = task.add_parser("create", help="create a task, or give it a new revision")
    dsn(p)
    p.add_argument("--project", type=_name, required=True, metavar="NAME|ID", help="the project, by name or id")
    p.add_argument("--name", required=True, help="the task's name (a new plan under it is a new revision)")
    p.add_argument("--timeout-ms", type=_positive, help="how long one attempt may run")
    p.add_argument("--max-attempts", type=_positive, help="attempts of one Run, retries included")
    p.add_argument("--retry-backoff-ms", type=int, help="the wait before a retry")
    p.add_argument("--pool", help="only Workers of this pool run it")
    p.add_argument("--env", action="append", metavar="NAME=VALUE", help="an environment variable (repeatable)")
    p.add_argument("--schedule", metavar="CRON", help="also schedule it: 5 cron fields, e.g. '*/5 * * * *'")
    p.add_argument("--timezone", help="with --schedule: the IANA time zone its fields are read in (default UTC)")
    p.add_argument("--overlap", choices=("skip", "allow"), help="with --schedule: while a Run is live (default skip)")
    p.add_argument("argv", nargs="+", help="the command, after --")
    creating(p)
    p.set_defaults(handler=cmd_task_create)
    p = task.add_parser("schedule", help="set, clear or show a task's schedule and its next fire times")
    dsn(p)
    p.add_argument("--project", type=_name, required=True, metavar="NAME|ID", help="the project, by name or id")
    p.add_argument("--name", required=True, help="the task's name")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--cron", help="set it: 5 cron fields (minute hour day-of-month month day-of-week) or @daily …")
    what.add_argument("--clear", action="store_true", help="remove the schedule")
    what.add_argument("--show", action="store_true", help="print it, its next and its last fire times")
    p.add_argument("--timezone", default="UTC", help="the IANA time zone the fields are read in (default UTC)")
    p.add_argument("--overlap", choices=("skip", "allow"), default="skip",
                   help="skip (default) or allow a fire time while a Run of the task is not terminal")  # fmt: skip
    p.add_argument("--count", type=_positive, default=5, help="how many next and last fire times to print (1..100)")
    p.add_argument("--json", action="store_true", help="print the change and the schedule as one JSON document")
    p.set_defaults(handler=cmd_task_schedule)

    run = group("run", "Runs, through the user API")
    p = run.add_parser("enqueue", help="queue a Run of a task (prints the Run's id)")
    api(p)
    p.add_argument("--verbose", action="store_true", help="also print a sentence on stderr")
    p.add_argument("--task", type=_name, required=True, metavar="NAME|ID", help="the task, by name or id")
    p.set_defaults(handler=cmd_run_enqueue)
    p = run.add_parser("cancel", help="ask to cancel a Run (reason user)")
    api(p)
    p.add_argument("--run", type=_uuid, required=True, help="the Run's id")
    p.set_defaults(handler=cmd_run_cancel)
    p = run.add_parser("show", help="a Run's event timeline")
    api(p)
    p.add_argument("--run", type=_uuid, required=True, help="the Run's id")
    p.set_defaults(handler=cmd_run_show)
    p = run.add_parser("list", help="a project's Runs, newest first, one page at a time")
    api(p)
    p.add_argument("--task", type=_name, metavar="NAME|ID", help="only this task's Runs (by name or id)")
    p.add_argument("--status", choices=RUN_STATUSES, help="only Runs in this status")
    p.add_argument("--since", type=_instant_ms, metavar="ISO", help="created at or after (no offset: UTC)")
    p.add_argument("--until", type=_instant_ms, metavar="ISO", help="created before (no offset: UTC)")
    p.add_argument("--limit", type=_positive, help="Runs per page, at most 100 (default 50)")
    p.add_argument("--cursor", help="the next page: the cursor the previous page printed")
    p.add_argument("--ids", action="store_true", help="print only the Runs' ids, one per line")
    p.set_defaults(handler=cmd_run_list)
    p = run.add_parser("logs", help="a Run's output: its stdout on stdout, its stderr on stderr")
    api(p)
    p.add_argument("--run", type=_uuid, required=True, help="the Run's id")
    p.add_argument("--attempt", type=_positive, help="this Attempt (its number), not the latest")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new output until the Run ends")
    p.set_defaults(handler=cmd_run_logs)

    p = groups.add_parser("converge", help="one convergence cycle (what pg_cron runs every minute)")
    dsn(p)
    p.add_argument("--once", action="store_true", required=True, help="one cycle (the only mode)")
    p.add_argument("--page-size", type=_positive, default=64, help="Runs per page (default 64)")
    p.add_argument("--max-pages", type=_positive, default=16, help="pages in this cycle at most (default 16)")
    p.add_argument(
        "--grace-ms",
        type=int,
        default=30000,
        help="how long past its lease expiry a running Attempt is declared lost (default 30000)",
    )
    p.set_defaults(handler=cmd_converge)

    shell = group("shell", "the HTTPS shell")
    p = shell.add_parser("serve", help="serve the worker ingress, user API and admin listeners")
    p.add_argument("--config", type=Path, required=True, help="TOML file (see qinglong.shell.config)")
    p.set_defaults(handler=cmd_shell_serve)
    catalogue.add_commands(worker, project, subject, task, group, dsn, _admin_transaction)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
        code: int = args.handler(args)
        sys.stdout.flush()  # here, so a reader that went away is seen here
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's own flush must not fail again
        return EXIT_BROKEN_PIPE
    except Failure as failure:
        print(f"qinglong: {failure}", file=sys.stderr)
        return failure.code
    except OSError as exc:
        print(f"qinglong: {exc.strerror or exc}: {getattr(exc, 'filename', '') or ''}".rstrip(": "), file=sys.stderr)
        return EXIT_USAGE
    return code


if __name__ == "__main__":
    sys.exit(main())
