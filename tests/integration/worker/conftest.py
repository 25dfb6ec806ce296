"""Fixtures of the Worker's integration tests: the real shell (worker ingress on TLS 1.3 mTLS and the
user API, over a fresh database per test) with an observing middleware, the shell's session PKI,
seeded rows (Worker A enrolled with its certificate, a Project with an operator), an Attempt's output
as the database holds it, a Worker client that
records every call it makes (a test-side spy around the real `IngressClient`), lifecycles
built from the real Executor and LocalProcessController, `qinglong-worker run` as a separate OS
process, read-only views of the inbox journal, and a teardown that leaves no process behind.

Touches: the session cluster's per-test database, loopback ports chosen by the kernel, the test's
tmp_path (journal, work folders, credential copies, worker configs), child processes (task runners,
Worker processes, stand-in processes) and, while a test runs a Worker process, this process's
child-subreaper flag (so orphaned task runners are reaped here, not left as zombies).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final, Literal, TypeVar

import psycopg
import pytest
from aiohttp import web
from aiohttp.typedefs import Handler

from qinglong.shell.app import make_app
from qinglong.shell.db import Database as ShellDatabase
from qinglong.shell.tls import server_context
from qinglong.wire import (
    ActivationRequest,
    ActivationResponse,
    ActivationStartFailureRequest,
    CompletionRequest,
    CompletionResponse,
    LeaseControlRequest,
    LeaseControlResponse,
    Message,
    OfferResponse,
    OutputAppended,
    OutputAppendRequest,
    WorkerSessionAlive,
    ql3w,
)
from qinglong.wire.bundle_fetch import BundleChunk, BundleChunkRequest
from qinglong.worker.bundles import BundleCache
from qinglong.worker.client import FileCredentials, IngressClient, Session
from qinglong.worker.controller import LocalProcessController
from qinglong.worker.executor import Executor, TaskPolicy
from qinglong.worker.identity import ProcessHandle, boottime_ns
from qinglong.worker.lifecycle import Lifecycle
from tests.conftest import Database as PgDatabase
from tests.integration.db.factories import Subject, make_project, make_revision, make_runs, make_user, set_role
from tests.integration.shell.conftest import Pki, Shell
from tests.integration.shell.conftest import pki as pki  # the shell's session PKI fixture, reused here

T = TypeVar("T")
PR_SET_CHILD_SUBREAPER: Final = 36
ENDED_RUN: Final = frozenset({"succeeded", "failed", "cancelled", "timed_out"})


async def poll(predicate: Callable[[], bool], *, within: float, every: float = 0.02) -> None:
    """Await until `predicate()` holds; AssertionError after `within` s."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within} s")
        await asyncio.sleep(every)


# -- process facts, read from /proc (independent of the code under test) ---------------------------


@dataclass(frozen=True)
class ProcStat:
    pid: int
    state: str
    ppid: int
    pgrp: int
    start_time: int


def proc_stat(pid: int) -> ProcStat | None:
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return None
    rest = data[data.rfind(b")") + 1 :].split()
    return ProcStat(pid, rest[0].decode(), int(rest[1]), int(rest[2]), int(rest[19]))


def running(pid: int, start_time: int) -> bool:
    """The process `pid` exists with this start time and is not a zombie."""
    st = proc_stat(pid)
    return st is not None and st.start_time == start_time and st.state not in ("Z", "X")


def all_processes() -> Iterator[ProcStat]:
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = proc_stat(int(name))
            if st is not None:
                yield st


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of the process group `pgid`."""
    return [st.pid for st in all_processes() if st.pgrp == pgid and st.state not in ("Z", "X")]


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def socket_fds() -> set[str]:
    """The sockets this process has open (the targets of /proc/self/fd links)."""
    found: set[str] = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:"):
                found.add(target)
    return found


def status_file(handle: ProcessHandle) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(Path(handle.status_path).read_bytes())
    except FileNotFoundError:
        return None
    return data


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def kill_handle(handle: ProcessHandle) -> None:
    """SIGKILL a task's process group, only while its leader's identity still holds; reap it if ours."""
    if running(handle.pid, handle.start_time):
        st = proc_stat(handle.pid)
        if st is not None and st.pgrp == handle.pgid:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(handle.pgid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while running(handle.pid, handle.start_time) and time.monotonic() < deadline:
            time.sleep(0.01)
    _reap(handle.pid)


# -- the journal, read-only (the Worker may own it meanwhile: sqlite reads do not take its flock) -----


@dataclass(frozen=True)
class JournalRow:
    offer_id: str
    seq: int
    revision: int
    state: str
    data: Mapping[str, Any]

    @property
    def handle(self) -> ProcessHandle | None:
        raw = self.data.get("handle")
        return None if raw is None else ProcessHandle.from_dict(raw)

    @property
    def lease_expires_ns(self) -> int | None:
        value = self.data.get("lease_expires_boottime_ns")
        return None if value is None else int(value)

    @property
    def lease_version(self) -> int:
        return int(self.data["lease_version"])


def read_journal(path: Path) -> list[JournalRow]:
    if not path.exists():
        return []
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute("select offer_id, seq, revision, state, data from inbox order by seq").fetchall()
    except sqlite3.OperationalError:
        return []  # created a moment ago, its table not yet
    finally:
        conn.close()
    return [JournalRow(r[0], r[1], r[2], r[3], json.loads(r[4])) for r in rows]


def only_record(path: Path) -> JournalRow | None:
    rows = read_journal(path)
    assert len(rows) <= 1, [r.state for r in rows]
    return rows[0] if rows else None


# -- a Worker client that records what it is asked to do (test-side spy) ----------------------------


@dataclass
class Call:
    name: str
    body: Message | None
    started_ns: int  # CLOCK_BOOTTIME when the call was made (the lease clock)
    started_wall: float
    ended_ns: int = 0
    ended_wall: float = 0.0
    result: object = None
    error: BaseException | None = None


class SpyClient(IngressClient):
    """The real client; every call is also recorded (what, when, with which body, what came back)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[Call] = []
        self.on_answer: Callable[[Call], None] | None = None  # runs when an answer arrives, before the caller sees it

    def named(self, name: str) -> list[Call]:
        return [c for c in self.calls if c.name == name]

    async def _spied(self, name: str, body: Message | None, call: Awaitable[T]) -> T:
        entry = Call(name, body, boottime_ns(), time.time())
        self.calls.append(entry)
        try:
            result = await call
        except BaseException as exc:
            entry.error = exc
            raise
        finally:
            entry.ended_ns, entry.ended_wall = boottime_ns(), time.time()
        entry.result = result
        if self.on_answer is not None:
            self.on_answer(entry)
        return result

    async def open_session(self, *, capacity: int, generation: int) -> Session:
        return await self._spied("open", None, super().open_session(capacity=capacity, generation=generation))

    async def heartbeat(self, session: Session) -> WorkerSessionAlive:
        return await self._spied("heartbeat", None, super().heartbeat(session))

    async def pull(self, session: Session, pull_id: str) -> OfferResponse:
        return await self._spied("pull", None, super().pull(session, pull_id))

    async def activate(
        self,
        session: Session,
        offer_id: str,
        phase: Literal["starting", "running", "start-failure"],
        body: ActivationRequest | ActivationStartFailureRequest,
    ) -> ActivationResponse:
        return await self._spied(phase, body, super().activate(session, offer_id, phase, body))

    async def lease_control(
        self, session: Session, body: LeaseControlRequest, *, timeout_s: float | None = None
    ) -> LeaseControlResponse:
        return await self._spied("lease-control", body, super().lease_control(session, body, timeout_s=timeout_s))

    async def append_output(
        self, session: Session, offer_id: str, body: OutputAppendRequest, *, timeout_s: float | None = None
    ) -> OutputAppended:
        return await self._spied("output", body, super().append_output(session, offer_id, body, timeout_s=timeout_s))

    async def bundle_chunk(self, session: Session, offer_id: str, body: BundleChunkRequest) -> BundleChunk:
        return await self._spied("bundle-chunks", body, super().bundle_chunk(session, offer_id, body))

    async def complete(self, session: Session, offer_id: str, body: CompletionRequest) -> CompletionResponse:
        return await self._spied("completion", body, super().complete(session, offer_id, body))


# -- the shell, served in-process, observed by a middleware --------------------------------------------


def route_kind(path: str) -> str:
    """open | heartbeat | pull | starting | running | start-failure | lease-control | output | bundle-chunks |
    completion."""
    if path.endswith("/sessions"):
        return "open"
    tail = path.rsplit("/", 1)[-1]
    return "pull" if tail == "offers:pull" else tail


@dataclass(eq=False)
class Seen:
    """One request as the server saw it: which route, from which client port, on which connection."""

    kind: str
    port: int
    transport: asyncio.BaseTransport
    peer_cert_sha256: str
    at_ns: int


class Served:
    """The worker-ingress and user-API apps on loopback; every worker-ingress request is recorded.
    `hold_pulls` makes the pull route wait (until `release_pulls`) after signalling `pull_arrived`.
    `lose[kind] = n`: the next n answers of that route are lost AFTER the handler ran (its transaction
    committed): the connection is cut instead of answering, as a dropped link would."""

    def __init__(self, db: ShellDatabase, pki: Pki, worker_app_options: Mapping[str, Any] | None = None) -> None:
        self.db = db
        self.pki = pki
        self.worker_app_options = dict(worker_app_options or {})  # more keyword arguments of make_app("worker")
        self.secret = os.urandom(32)
        self.seen: list[Seen] = []
        self.hold_pulls = False
        self.pull_arrived = asyncio.Event()
        self.release_pulls = asyncio.Event()
        self.lose: dict[str, int] = {}
        self.lost: list[str] = []
        self._runners: dict[str, web.AppRunner] = {}
        self.shell: Shell | None = None

    @property
    def worker_url(self) -> str:
        assert self.shell is not None
        return self.shell.worker_url

    def kinds(self, since: int = 0) -> list[str]:
        return [s.kind for s in self.seen[since:]]

    def ports(self, since: int = 0) -> list[int]:
        """Distinct client ports, in the order first seen."""
        return list(dict.fromkeys(s.port for s in self.seen[since:]))

    async def _observe(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        transport = request.transport
        assert transport is not None
        peer = transport.get_extra_info("peername")
        ssl_object = transport.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        kind = route_kind(request.path)
        self.seen.append(Seen(kind, int(peer[1]), transport, hashlib.sha256(der or b"").hexdigest(), boottime_ns()))
        if kind == "pull" and self.hold_pulls:
            self.pull_arrived.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.release_pulls.wait(), 30)
        response = await handler(request)
        if self.lose.get(kind, 0) > 0:
            self.lose[kind] -= 1
            self.lost.append(kind)
            transport.abort()  # the database committed; the answer never arrives
        return response

    def _worker_app(self) -> web.Application:
        worker_app = make_app("worker", self.db, ql3w.Keyring(self.secret), **self.worker_app_options)

        @web.middleware
        async def observe(request: web.Request, handler: Handler) -> web.StreamResponse:
            return await self._observe(request, handler)

        worker_app.middlewares.append(observe)
        return worker_app

    async def _listen(self, name: str, app: web.Application, port: int) -> int:
        pki = self.pki
        client_ca = pki.ca if name == "worker" else None
        runner = web.AppRunner(app, shutdown_timeout=2.0)
        await runner.setup()
        self._runners[name] = runner
        ctx = server_context(pki.server.certificate, pki.server.key, client_ca=client_ca)
        await web.TCPSite(runner, "127.0.0.1", port, ssl_context=ctx).start()
        return int(runner.addresses[0][1])

    async def start(self) -> None:
        await self.db.open()
        ports: dict[str, int] = {}
        for name, app in (("worker", self._worker_app()), ("user", make_app("user", self.db))):
            ports[name] = await self._listen(name, app, 0)
        self.shell = Shell(
            worker_url=f"https://127.0.0.1:{ports['worker']}",
            user_url=f"https://127.0.0.1:{ports['user']}",
            admin_url="http://127.0.0.1:0",
            db=self.db,
            secret=self.secret,
            worker_port=ports["worker"],
            user_port=ports["user"],
        )

    async def stop_worker_ingress(self) -> None:
        """The control plane becomes unreachable: the listener and every open connection close."""
        runner = self._runners.pop("worker", None)
        if runner is not None:
            await runner.cleanup()

    async def resume_worker_ingress(self) -> None:
        """The control plane is reachable again: the worker ingress listens on its port once more (the same shell
        secret, so the Worker's sessions, and the database's, are what decides)."""
        assert self.shell is not None and "worker" not in self._runners
        await self._listen("worker", self._worker_app(), self.shell.worker_port)

    async def stop(self) -> None:
        self.release_pulls.set()
        for name in ("worker", "user"):
            runner = self._runners.pop(name, None)
            if runner is not None:
                await runner.cleanup()
        await self.db.close()


# -- the Worker as a separate OS process (`qinglong-worker run`) -----------------------------------------


@dataclass
class WorkerProcess:
    popen: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes]

    @property
    def pid(self) -> int:
        return self.popen.pid

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    async def wait(self, within: float) -> int | None:
        """The exit code once it exits within `within` s, else None (still running)."""
        with contextlib.suppress(AssertionError):
            await poll(lambda: self.popen.poll() is not None, within=within)
        return self.popen.returncode

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait()
        self.log.close()


@contextlib.contextmanager
def child_subreaper() -> Iterator[None]:
    """Orphans of our descendants (task runners of a killed Worker process) become our children, so
    they can be reaped here instead of staying zombies under a PID 1 that does not reap."""
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0, os.strerror(ctypes.get_errno())
    try:
        yield
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


# -- the rig: rows, shell, credentials, clients, lifecycles, processes ------------------------------------


@dataclass
class Rig:
    database: PgDatabase
    pki: Pki
    served: Served
    root: Path
    worker_id: str
    project: uuid.UUID
    operator: Subject
    conn: psycopg.Connection[Any]
    creds: FileCredentials
    journal_path: Path
    work_dir: Path
    clients: list[IngressClient] = field(default_factory=list)
    lifecycles: list[Lifecycle] = field(default_factory=list)
    processes: list[WorkerProcess] = field(default_factory=list)
    others: list[subprocess.Popen[bytes]] = field(default_factory=list)
    handles: list[ProcessHandle] = field(default_factory=list)

    # -- rows --

    def set_lease_ttl(self, ms: int) -> None:
        self.conn.execute("update ql.settings set lease_ttl_ms = %s", (ms,))

    def add_runs(self, plan: Mapping[str, Any], count: int = 1) -> list[str]:
        revision = make_revision(self.conn, self.project, dict(plan))
        return [str(r) for r in make_runs(self.conn, revision, count)]

    def add_run(self, plan: Mapping[str, Any]) -> str:
        return self.add_runs(plan, 1)[0]

    def one(self, query: str, params: tuple[Any, ...] = ()) -> Any:
        row = self.conn.execute(query, params).fetchone()
        assert row is not None, query
        return row[0] if len(row) == 1 else row

    def rows(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return self.conn.execute(query, params).fetchall()

    def lease_version(self, run: str) -> int:
        """The stored Lease version of the Run's (only) Attempt."""
        sql = "select l.version from ql.run_leases l join ql.run_attempts a on a.id = l.attempt_id where a.run_id = %s"
        return int(self.one(sql, (run,)))

    def run_status(self, run: str) -> str:
        return str(self.one("select status from ql.runs where id = %s", (run,)))

    def attempts(self, run: str) -> list[dict[str, Any]]:
        names = ("id", "attempt_no", "status", "exit_code", "error_code", "deadline_at_ms", "offer_id")
        found = self.rows(
            "select id::text, attempt_no, status::text, exit_code, error_code, deadline_at_ms, offer_id::text"
            " from ql.run_attempts where run_id = %s order by attempt_no",
            (run,),
        )
        return [dict(zip(names, r, strict=True)) for r in found]

    def events(self, run: str) -> list[tuple[str, str, str | None]]:
        """(type, actor kind, actor id) in sequence order."""
        return [
            (str(t), str(k), None if a is None else str(a))
            for t, k, a in self.rows(
                "select type, actor_kind::text, actor_id from ql.run_events where run_id = %s order by sequence",
                (run,),
            )
        ]

    def output(self, run: str, stream: str = "stdout", attempt_no: int = 1) -> bytes:
        """What the database holds of one stream of the Run's Attempt: its chunks in byte order, concatenated."""
        data = self.one(
            "select coalesce(string_agg(c.data, ''::bytea order by c.byte_offset), ''::bytea)"
            " from ql.output_chunks c join ql.run_attempts a on a.id = c.attempt_id"
            " where a.run_id = %s and a.attempt_no = %s and c.stream::text = %s",
            (run, attempt_no, stream),
        )
        return bytes(data)

    def db_now_ms(self) -> int:
        return int(self.one("select ql.now_ms()"))

    # -- the Worker, in this process --

    def client(self) -> SpyClient:
        client = SpyClient(self.served.worker_url, self.worker_id, self.creds)
        self.clients.append(client)
        return client

    def lifecycle(
        self,
        client: IngressClient | None = None,
        *,
        page_size: int = 16,
        capacity: int = 1,
        grace_s: float = 1.0,
        bundles: BundleCache | None = None,
    ) -> Lifecycle:
        lc = Lifecycle(
            journal_path=self.journal_path,
            client=client if client is not None else self.client(),
            executor=Executor(self.work_dir, stop_grace_s=grace_s, policy=TaskPolicy(allow_root_tasks=True)),
            controller=LocalProcessController(grace_s=grace_s),
            generation=1,
            capacity=capacity,
            page_size=page_size,
            bundles=bundles,
        )
        self.lifecycles.append(lc)
        return lc

    async def tick_until(
        self,
        lc: Lifecycle,
        done: Callable[[], bool],
        *,
        within: float = 10.0,
        every: float = 0.1,
    ) -> int:
        """Tick (then pause `every` s) until `done()`; the number of ticks. AssertionError past `within` s."""
        deadline = time.monotonic() + within
        ticks = 0
        while True:
            await lc.tick()
            ticks += 1
            if done():
                return ticks
            if time.monotonic() > deadline:
                raise AssertionError(f"not done after {ticks} ticks ({within} s)")
            await asyncio.sleep(every)

    def record(self) -> JournalRow:
        found = only_record(self.journal_path)
        assert found is not None, "the journal holds no record"
        return found

    def state(self) -> str | None:
        found = only_record(self.journal_path)
        return None if found is None else found.state

    # -- the Worker as a process --

    def write_config(self, *, tick_seconds: float, shutdown_seconds: float = 5.0, extra: Sequence[str] = ()) -> Path:
        config = self.root / "worker.toml"
        config.write_text(
            "\n".join(
                (
                    f'origin = "{self.served.worker_url}"',
                    f'worker_id = "{self.worker_id}"',
                    "generation = 1",
                    "capacity = 1",
                    f'certificate = "{self.creds.certificate}"',
                    f'key = "{self.creds.key}"',
                    f'trust_anchors = "{self.creds.trust_anchors}"',
                    f'journal = "{self.journal_path}"',
                    f'work_dir = "{self.work_dir}"',
                    "require_signed_plans = false",  # unsigned plans (tests of signatures sign their own)
                    f"tick_seconds = {tick_seconds}",
                    "page_size = 16",
                    f"shutdown_seconds = {shutdown_seconds}",
                    "stop_grace_seconds = 1.0",
                    # these tests run as root; a Worker as root runs no task as root unless told to
                    *(extra or ("allow_root_tasks = true",)),
                    # tests read what a task left after its Run ended: kept an hour unless a test sets it
                    *(
                        ()
                        if any(line.startswith("keep_files_seconds") for line in extra)
                        else ("keep_files_seconds = 3600",)
                    ),
                    "",
                )
            )
        )
        return config

    def start_worker_process(
        self, config: Path, *, command: Sequence[str] = (sys.executable, "-m", "qinglong.worker")
    ) -> WorkerProcess:
        """`qinglong-worker run --config FILE`: by default the console script's `main` run as a module of
        this interpreter; `command` starts another install's Worker (tests/e2e/test_install.py)."""
        log_path = self.root / f"worker-{len(self.processes)}.log"
        log = log_path.open("wb")
        popen = subprocess.Popen(
            [*command, "run", "--config", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.root,
        )
        process = WorkerProcess(popen, log_path, log)
        self.processes.append(process)
        return process

    def spawn_other(self, argv: list[str]) -> subprocess.Popen[bytes]:
        """A process unrelated to the Worker, in its own session (so its group is its own)."""
        popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
        self.others.append(popen)
        return popen

    # -- teardown --

    async def cleanup(self) -> None:
        for lc in self.lifecycles:
            with contextlib.suppress(Exception):
                await lc.stop()
        for client in self.clients:
            await client.close()
        for process in self.processes:
            process.kill()
        handles = list(self.handles)
        for row in read_journal(self.journal_path):
            with contextlib.suppress(ValueError, KeyError, TypeError):
                if row.handle is not None:
                    handles.append(row.handle)
        for handle in handles:
            kill_handle(handle)
            for st in all_processes():  # members that outlived their group leader (created after it)
                if st.pgrp == handle.pgid and st.start_time >= handle.start_time and st.pid != os.getpid():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(st.pid, signal.SIGKILL)
        for other in self.others:
            if other.poll() is None:
                other.kill()
            other.wait()
        self.conn.close()
        await self._assert_nothing_left({h.pgid for h in handles})

    async def _assert_nothing_left(self, groups: set[int]) -> None:
        """No process of this test's folders or task groups survives; no zombie child of ours stays."""
        me = os.getpid()
        left: list[str] = []
        for _ in range(100):
            left = []
            for st in all_processes():
                if st.pid == me:
                    continue
                if st.ppid == me and st.state == "Z":
                    _reap(st.pid)
                    continue
                if st.pgrp in groups or str(self.root) in cmdline(st.pid):
                    left.append(f"{st.pid} {st.state} {cmdline(st.pid)}")
            if not left:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"processes left behind: {left}")


def _copy_credentials(pki: Pki, folder: Path) -> FileCredentials:
    folder.mkdir(mode=0o700)
    cert, key, ca = folder / "worker.crt", folder / "worker.key", folder / "ca.crt"
    shutil.copyfile(pki.worker_a.certificate, cert)
    shutil.copyfile(pki.worker_a.key, key)
    key.chmod(0o600)
    shutil.copyfile(pki.ca, ca)
    return FileCredentials(cert, key, ca)


@contextlib.asynccontextmanager
async def rig_over(
    database: PgDatabase,
    pki: Pki,
    tmp_path: Path,
    shell_db: ShellDatabase,
    project_name: str = "project-w",
    worker_app_options: Mapping[str, Any] | None = None,
) -> AsyncIterator[Rig]:
    """A project, worker-a enrolled, an operator, and the in-process shell over `shell_db` (its pool:
    direct to the test database, or through pgbouncer); `worker_app_options`: more keyword arguments of the
    worker-ingress app (e.g. what opens sealed secrets)."""
    conn = psycopg.connect(database.dsn(), autocommit=True)
    project = make_project(conn, project_name)
    conn.execute(
        "insert into ql.workers (id, name, cert_fingerprint) values (%s, 'worker-a', %s)",
        (pki.worker_a_id, pki.worker_a.fingerprint),
    )
    operator = make_user(conn)
    set_role(conn, project, operator, "operator", True)
    served = Served(shell_db, pki, worker_app_options)
    try:
        await served.start()
    except BaseException:
        await served.stop()
        conn.close()
        raise
    rig = Rig(
        database=database,
        pki=pki,
        served=served,
        root=tmp_path,
        worker_id=pki.worker_a_id,
        project=project,
        operator=operator,
        conn=conn,
        creds=_copy_credentials(pki, tmp_path / "creds"),
        journal_path=tmp_path / "w" / "inbox.sqlite",
        work_dir=tmp_path / "w" / "runs",
    )
    try:
        yield rig
    finally:
        try:
            await rig.cleanup()
        finally:
            await served.stop()


@pytest.fixture
async def rig(database: PgDatabase, pki: Pki, tmp_path: Path) -> AsyncIterator[Rig]:
    async with rig_over(database, pki, tmp_path, ShellDatabase(database.runtime_dsn)) as made:
        yield made
