"""`qinglong-worker run --config FILE`: one Worker process — one outer cadence calling the headless
lifecycle's tick, SIGTERM/SIGINT → an orderly stop within one shutdown budget. Touches the journal
and work folders named in the config, the credential files, the network and local processes, and
after every tick rewrites the status file beside the journal (`qinglong-worker status` reads it).
`qinglong-worker journal list|show|resolve` and `status` are the operator's commands (worker/admin.py):
they read the same config but use only its `journal`, never the network.

    origin = "https://control.example:8443"
    worker_id = "…uuid…"
    generation = 1
    capacity = 2
    certificate = "worker.crt"       # relative paths are relative to this file
    key = "worker.key"
    trust_anchors = "ca.crt"
    journal = "state/inbox.sqlite"
    work_dir = "state/runs"
    tick_seconds = 2.0
    page_size = 16
    shutdown_seconds = 20.0
    stop_grace_seconds = 5.0
    run_as = []                      # users a plan may name (switching needs root or CAP_SETUID/SETGID)
    run_as_groups = []               # groups a plan may name
    allow_absolute_cwd = false       # true: a plan's cwd may be an absolute, existing directory
    allow_root_tasks = false         # true: a task may run as root (a root Worker's default user)
    secret_store = "auto"            # where secret files' bytes live: a folder on a tmpfs; "auto": one in
                                     # /dev/shm when that is a tmpfs; "off": in the Run's directory
    trusted_plan_keys = ["ops.pub"]  # operator public keys (`qinglong pki plan-key new`) whose plans may run
    require_signed_plans = true      # refuse every plan not signed by one of them (false: unsigned ones run)
    bundle_cache_mib = 256           # the bundle cache's size (least recently used bundles go first)
    bundle_fetch_seconds = 600       # a bundle not fetched by then is a start failure (bundle.fetch_timeout)
    keep_files_seconds = 0           # an Attempt's files stay this long after the database acknowledged its success
    keep_failed_files_seconds = 86400  # ... and after any other end (for inspection); its secret files go at once
    journal_keep_seconds = 259200    # a journal record whose files are gone is deleted this long after its end,
    journal_keep_records = 100       # except the newest this many (`qinglong-worker journal list`)
    min_free_mib = 32                # below this much free space on work_dir's file system, pull nothing
    output_head_kib = 512            # per stream, the first bytes kept on disk (spool.py), and at least
    output_tail_kib = 512            # the last ones, at most twice that: set both at least the database's
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import importlib.util
import logging
import os
import signal
import sys
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from qinglong.wire.codec import WireError
from qinglong.wire.fields import Bool, Int, List, Record, Seconds, Str, Uuid, wire
from qinglong.wire.logline import configure as configure_logging
from qinglong.wire.logline import emit
from qinglong.wire.offer import ACCOUNT_PATTERN
from qinglong.worker import admin
from qinglong.worker.bundles import BUNDLE_CACHE_BYTES, FETCH_LIMIT_S, BundleCache
from qinglong.worker.client import FileCredentials, IngressClient
from qinglong.worker.controller import LocalProcessController
from qinglong.worker.delivery import SHM, is_tmpfs
from qinglong.worker.disk import MIB, MIN_FREE_MIB, DiskBudget
from qinglong.worker.executor import Executor, TaskPolicy
from qinglong.worker.journal import STATES, JournalBusy, JournalError
from qinglong.worker.lifecycle import Lifecycle
from qinglong.worker.retention import Retention
from qinglong.worker.spool import HEAD_BYTES, TAIL_BYTES
from qinglong.worker.trust import PlanTrust

log = logging.getLogger("qinglong.worker")

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class ConfigError(Exception):
    """A one-line reason the Worker cannot start."""


@dataclass(frozen=True)
class WorkerConfig:
    origin: str
    worker_id: str
    generation: int
    credentials: FileCredentials
    journal: Path
    work_dir: Path
    capacity: int = 1
    tick_seconds: float = 2.0
    page_size: int = 16
    shutdown_seconds: float = 20.0
    stop_grace_seconds: float = 5.0
    task_policy: TaskPolicy = field(default_factory=TaskPolicy)
    secret_store: Path | None = None  # the base folder of the launches' secret stores (delivery.py)
    trust: PlanTrust = field(default_factory=PlanTrust)
    bundle_cache_bytes: int = BUNDLE_CACHE_BYTES
    bundle_fetch_seconds: float = FETCH_LIMIT_S
    retention: Retention = field(default_factory=Retention)
    min_free_bytes: int = MIN_FREE_MIB * MIB
    spool_bytes: tuple[int, int] = (HEAD_BYTES, TAIL_BYTES)


PATH = Str(4096, min_len=1)  # a file or folder, relative to the config file
KEEP = Seconds(0, 10 * 365 * 86400)  # a retention time (retention.py)
ACCOUNTS = List(Str(32, min_len=1, pattern=ACCOUNT_PATTERN), max_items=256)  # names, as a plan gives them


class _ConfigFile(Record):
    """worker.toml exactly: unknown keys, missing ones and wrong types are refused by the engine that
    parses wire messages (names are the file's own, snake_case)."""

    origin: str = wire(Str(300, min_len=1), name="origin")
    worker_id: str = wire(Uuid(), name="worker_id")
    generation: int = wire(Int(1), name="generation")
    capacity: int | None = wire(Int(1, 256), name="capacity", optional=True, default=None)
    certificate: str = wire(PATH, name="certificate")
    key: str = wire(PATH, name="key")
    trust_anchors: str = wire(PATH, name="trust_anchors")
    journal: str = wire(PATH, name="journal")
    work_dir: str = wire(PATH, name="work_dir")
    tick_seconds: float | None = wire(Seconds(0.05, 3600), name="tick_seconds", optional=True, default=None)
    page_size: int | None = wire(Int(1, 64), name="page_size", optional=True, default=None)
    shutdown_seconds: float | None = wire(Seconds(0, 3600), name="shutdown_seconds", optional=True, default=None)
    stop_grace_seconds: float | None = wire(Seconds(0, 3600), name="stop_grace_seconds", optional=True, default=None)
    run_as: tuple[str, ...] | None = wire(ACCOUNTS, name="run_as", optional=True, default=None)
    run_as_groups: tuple[str, ...] | None = wire(ACCOUNTS, name="run_as_groups", optional=True, default=None)
    allow_absolute_cwd: bool | None = wire(Bool(), name="allow_absolute_cwd", optional=True, default=None)
    allow_root_tasks: bool | None = wire(Bool(), name="allow_root_tasks", optional=True, default=None)
    secret_store: str | None = wire(PATH, name="secret_store", optional=True, default=None)
    trusted_plan_keys: tuple[str, ...] | None = wire(
        List(PATH, max_items=64), name="trusted_plan_keys", optional=True, default=None
    )
    require_signed_plans: bool | None = wire(Bool(), name="require_signed_plans", optional=True, default=None)
    bundle_cache_mib: int | None = wire(Int(1, 1 << 20), name="bundle_cache_mib", optional=True, default=None)
    bundle_fetch_seconds: float | None = wire(
        Seconds(1, 86400), name="bundle_fetch_seconds", optional=True, default=None
    )
    keep_files_seconds: float | None = wire(KEEP, name="keep_files_seconds", optional=True, default=None)
    keep_failed_files_seconds: float | None = wire(KEEP, name="keep_failed_files_seconds", optional=True, default=None)
    journal_keep_seconds: float | None = wire(KEEP, name="journal_keep_seconds", optional=True, default=None)
    journal_keep_records: int | None = wire(Int(0, 1 << 20), name="journal_keep_records", optional=True, default=None)
    min_free_mib: int | None = wire(Int(0, 1 << 30), name="min_free_mib", optional=True, default=None)
    output_head_kib: int | None = wire(Int(0, 1 << 20), name="output_head_kib", optional=True, default=None)
    output_tail_kib: int | None = wire(Int(1, 1 << 20), name="output_tail_kib", optional=True, default=None)


def _secret_store(given: str | None, base: Path, work_dir: Path) -> Path | None:
    """The store base `secret_store` names: its own folder on a tmpfs, or None for "off" (and for "auto" without a
    tmpfs at /dev/shm). A folder that is not on a tmpfs is refused: the point is that the bytes never reach a disk."""
    if given == "off":
        return None
    if given in (None, "auto"):
        if not (SHM.is_dir() and is_tmpfs(SHM) and os.access(SHM, os.W_OK | os.X_OK)):
            return None
        tag = hashlib.sha256(os.fsencode(os.path.realpath(work_dir))).hexdigest()[:16]
        return SHM / f"qinglong-worker-{os.geteuid()}-{tag}"  # one per Worker (by its work_dir) and user
    store = base / given
    if not is_tmpfs(store.parent if not store.exists() else store):
        raise ConfigError(f'secret_store: {store} is not on a tmpfs ("off" keeps secret files in the Run\'s folder)')
    return store


def _trust(given: _ConfigFile, base: Path) -> PlanTrust:
    """The plan keys this Worker trusts; every plan must be signed unless `require_signed_plans = false`."""
    required = given.require_signed_plans is not False
    try:
        return PlanTrust.load([base / p for p in given.trusted_plan_keys or ()], required)
    except ValueError as exc:
        raise ConfigError(f"trusted_plan_keys: {exc} (or require_signed_plans = false)") from None


def _retention(given: _ConfigFile) -> Retention:
    """The settings given, the defaults of Retention for the others."""
    named: dict[str, Any] = {
        "keep_files_s": given.keep_files_seconds,
        "keep_failed_files_s": given.keep_failed_files_seconds,
        "journal_keep_s": given.journal_keep_seconds,
        "journal_keep_records": given.journal_keep_records,
    }
    return Retention(**{k: v for k, v in named.items() if v is not None})


def load(path: Path) -> WorkerConfig:
    try:
        raw: dict[str, Any] = tomllib.loads(path.read_text())
        given = _ConfigFile.load_at(raw, path.name)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    except WireError as exc:
        raise ConfigError(exc.message) from None
    base = path.parent
    optional = {k: getattr(given, k) for k in ("capacity", "tick_seconds", "page_size", "shutdown_seconds",
                                                "stop_grace_seconds") if getattr(given, k) is not None}  # fmt: skip
    return WorkerConfig(
        origin=given.origin,
        worker_id=given.worker_id,
        generation=given.generation,
        credentials=FileCredentials(base / given.certificate, base / given.key, base / given.trust_anchors),
        journal=base / given.journal,
        work_dir=base / given.work_dir,
        secret_store=_secret_store(given.secret_store, base, base / given.work_dir),
        trust=_trust(given, base),
        bundle_cache_bytes=(given.bundle_cache_mib or BUNDLE_CACHE_BYTES // (1 << 20)) << 20,
        bundle_fetch_seconds=given.bundle_fetch_seconds or FETCH_LIMIT_S,
        retention=_retention(given),
        min_free_bytes=(MIN_FREE_MIB if given.min_free_mib is None else given.min_free_mib) * MIB,
        spool_bytes=(
            HEAD_BYTES if given.output_head_kib is None else given.output_head_kib << 10,
            TAIL_BYTES if given.output_tail_kib is None else given.output_tail_kib << 10,
        ),
        task_policy=TaskPolicy(
            run_as=frozenset(given.run_as or ()),
            run_as_groups=frozenset(given.run_as_groups or ()),
            allow_absolute_cwd=bool(given.allow_absolute_cwd),
            allow_root_tasks=bool(given.allow_root_tasks),
        ),
        **optional,
    )


async def run(config: WorkerConfig, *, stop: asyncio.Event | None = None) -> int:
    """Run until `stop` is set (or SIGTERM/SIGINT); return the exit code."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in _STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
    try:
        client = IngressClient(config.origin, config.worker_id, config.credentials)
    except ValueError as exc:
        raise ConfigError(f"origin: {exc}") from None
    try:  # a file it needs is missing: one line now, not a retry loop of unusable credentials
        config.credentials.load()
    except OSError as exc:
        raise ConfigError(f"cannot read {exc.filename}: {exc.strerror}") from None
    emit(log, logging.INFO, "worker.started", worker_id=config.worker_id, origin=config.origin,
         generation=config.generation, capacity=config.capacity, work_dir=str(config.work_dir),
         journal=str(config.journal))  # fmt: skip
    lifecycle = Lifecycle(
        journal_path=config.journal,
        client=client,
        executor=Executor(
            config.work_dir,
            stop_grace_s=config.stop_grace_seconds,
            policy=config.task_policy,
            store_base=config.secret_store,
            spool_bytes=config.spool_bytes,
        ),
        controller=LocalProcessController(grace_s=config.stop_grace_seconds),
        bundles=BundleCache(config.work_dir / "bundles", config.bundle_cache_bytes, config.bundle_fetch_seconds),
        trust=config.trust,
        retention=config.retention,
        disk=DiskBudget(config.work_dir, config.journal, config.min_free_bytes),
        generation=config.generation,
        capacity=config.capacity,
        page_size=config.page_size,
    )
    stopping = asyncio.ensure_future(stop.wait())
    work: asyncio.Future[None] | None = None
    try:
        work = asyncio.ensure_future(lifecycle.start())
        while True:
            # A signal never waits for a slow call: stop() below aborts it and waits for the tick.
            await asyncio.wait({work, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if stop.is_set():
                break
            work.result()
            _write_status(config.journal, lifecycle)
            if lifecycle.refused is not None:
                break  # only an operator can fix it: stop in order, then say so
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(stopping), config.tick_seconds)
            if stop.is_set():
                break
            work = asyncio.ensure_future(lifecycle.tick())
    finally:
        stopping.cancel()
        if work is not None and not work.done() and not lifecycle.scanned:
            work.cancel()  # a start() still paging the journal: abandon it before releasing ownership
            with contextlib.suppress(asyncio.CancelledError):
                await work
        try:
            await asyncio.wait_for(lifecycle.stop(), config.shutdown_seconds)
            if work is not None and not work.done():
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await work
        except TimeoutError:
            print("qinglong-worker: shutdown budget spent; journal released by exit", file=sys.stderr)
            return 1
        if config.secret_store is not None:
            with contextlib.suppress(OSError):
                config.secret_store.rmdir()  # an empty store base leaves with the Worker; one in use stays
    if lifecycle.refused is not None:
        print(
            f"qinglong-worker: the control plane refused this Worker ({lifecycle.refused}): check `generation`,"
            " the certificate files and the enrolment (docs/operations.md §10)",
            file=sys.stderr,
        )
        return 4
    return 3 if lifecycle.failed_closed else 0


def _write_status(journal: Path, lifecycle: Lifecycle) -> None:
    """Best effort: a Worker that cannot write its status keeps working (`status` then reads it as stale)."""
    with contextlib.suppress(OSError):
        admin.write_status(
            journal,
            session_id=lifecycle.last_session_id,
            last_contact_ms=lifecycle.last_contact_ms,
            failed_closed=lifecycle.failed_closed,
            disk=None if lifecycle.disk is None else lifecycle.disk.status(),
        )


def main(argv: Sequence[str] | None = None) -> int:
    # Held pending until run() has its handlers: a SIGTERM during start-up still stops in order.
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        return _main(argv)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see --help)\n")  # one line, exit 2


def _not_a_worker_command(word: str, commands: list[str]) -> str:
    """One line for `qinglong-worker pki …` and the like: the Worker's own commands, and where the
    control plane's commands (`qinglong db|pki|project|shell …`) come from when they are not installed."""
    where = (
        f"`qinglong {word} …` is the control plane's command"
        if importlib.util.find_spec("qinglong.cli") is not None
        else "control-plane commands (`qinglong db|pki|project|shell …`) need the qinglong-control "
        "distribution (its wheel, from `make dist` in the repository)"
    )
    return f"qinglong-worker: {word!r} is not a Worker command ({', '.join(commands)}); {where}"


def _main(argv: Sequence[str] | None) -> int:
    parser = _Parser(prog="qinglong-worker", description="Run a Qinglong remote Worker")
    sub = parser.add_subparsers(dest="command", required=True)
    run_cmd = sub.add_parser("run", help="run until SIGTERM")
    run_cmd.add_argument("--config", type=Path, required=True, help="TOML file (see qinglong.worker.run)")
    config_help = "the Worker's TOML file: only its journal is used"
    journal_cmd = sub.add_parser("journal", help="read the inbox journal, or settle an isolated record")
    journal_sub = journal_cmd.add_subparsers(dest="journal_command", required=True)
    list_cmd = journal_sub.add_parser("list", help="one line per record, newest last (works while the Worker runs)")
    list_cmd.add_argument("--config", type=Path, required=True, help=config_help)
    list_cmd.add_argument("--state", action="append", choices=STATES, metavar="STATE", help="only this state (repeat)")
    list_cmd.add_argument("--json", action="store_true", help="one JSON object per line")
    show_cmd = journal_sub.add_parser("show", help="one record as JSON, its lease token redacted")
    show_cmd.add_argument("offer", help="the offer id")
    show_cmd.add_argument("--config", type=Path, required=True, help=config_help)
    resolve_cmd = journal_sub.add_parser(
        "resolve", help="settle a recovery_required or lease_lost_local_execution_unverified record (Worker stopped)"
    )
    resolve_cmd.add_argument("offer", help="the offer id")
    resolve_cmd.add_argument("--config", type=Path, required=True, help=config_help)
    resolve_cmd.add_argument("--stopped", action="store_true", required=True, help="no process of the offer runs")
    resolve_cmd.add_argument("--reason", required=True, help="why, for the audit line and the record")
    status_cmd = sub.add_parser("status", help="journal summary and the running Worker's last contact")
    status_cmd.add_argument("--config", type=Path, required=True, help=config_help)
    words = list(sys.argv[1:] if argv is None else argv)
    if words and not words[0].startswith("-") and words[0] not in sub.choices:
        print(_not_a_worker_command(words[0], sorted(sub.choices)), file=sys.stderr)
        return 2
    args = parser.parse_args(words)
    if args.command != "run":
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)  # nothing to stop in order: Ctrl-C ends it
        try:
            journal = load(args.config).journal
        except ConfigError as exc:
            print(f"qinglong-worker: {exc}", file=sys.stderr)
            return 2
        return admin.main(args, journal)
    configure_logging()
    try:
        return asyncio.run(run(load(args.config)))
    except ConfigError as exc:
        print(f"qinglong-worker: {exc}", file=sys.stderr)
        return 2
    except JournalBusy:
        print("qinglong-worker: another Worker process owns this journal", file=sys.stderr)
        return 2
    except JournalError as exc:
        print(f"qinglong-worker: journal: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
