"""(e) Chaos on real parts: one engine, used by `make bench` (part e, ≥ 500 Runs) and, short, by
tests/integration/test_chaos.py (about 36 Runs). Real PostgreSQL (the schema deployed by sqitch),
the real shell as its own process, 2 or 3 real `qinglong-worker run` processes, each its own enrolled
Worker with its own journal and work folder, and between each Worker and the shell's worker port a
TCP fault proxy (asyncio, loopback) that, on a request chosen at random, loses the answer after the
shell committed, cuts the connection in the middle of the answer, stalls the answer, or resets the
connection before the request reaches the shell. Meanwhile Workers are SIGKILLed and restarted
(sometimes only after longer than the Lease TTL + the reconciliation grace), SIGSTOPped and
SIGCONTed, and one Worker's journal is deleted under it (it must fail closed; it is then killed and
restarted with a fresh journal). Convergence and lease-expiry recovery run every 0.5 s
(`CALL ql_api.converge(…)` as ql_scheduler), not pg_cron's minute.

Every Run is its own Task whose argv (`sh -c SCRIPT chaos-task FOLDER SECONDS CODE`) records its
own execution: it takes an exclusive non-blocking flock on FOLDER/lock for its whole life (a second
concurrent execution of one Run cannot take it and writes `overlap`), appends `start`, then `end`
(its exit code) or `term` (SIGTERM) lines with wall-clock times, its pid and its parent's pid (the
runner wrapper). The counts come from those records, the runner wrappers' own files in each
Worker's work folder (identity, dead-man's switch expiry, status), the fault log kept here and the
database's rows; nothing is assumed. Definitions: bench/README.md, part (e).

Touches: its root folder (PKI files, configs, journals, work folders, task records, logs), the
database it is given (settings, fixture rows via the operator functions, Runs through the user API),
loopback ports, the processes it starts (the shell, Workers, and, as their child subreaper, the
orphaned task runners of killed Workers), and this process's child-subreaper flag while it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import itertools
import json
import math
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import psycopg

from bench.common import REPO, Env, Result, ShellProcess, record_json, say, table
from qinglong.cli import admin, pki
from qinglong.cli.api import ApiError, Unreachable, UserApi
from qinglong.wire.common import ENDED_RUN_STATUSES, token_digest
from qinglong.worker.identity import boottime_ns

TERMINAL: Final = frozenset(ENDED_RUN_STATUSES)
RUN_END_EVENTS: Final = ("run.succeeded", "run.failed", "run.cancelled", "run.timed_out")
PR_SET_CHILD_SUBREAPER: Final = 36

# The task: an exclusive flock for its whole life, then its own record of its execution.
TASK_SCRIPT: Final = (
    'd=$1; exec 9>"$d/lock"; '
    'if ! flock -n 9; then echo "overlap $(date +%s.%N) $$ $PPID" >>"$d/log"; exit 75; fi; '
    'echo "start $(date +%s.%N) $$ $PPID" >>"$d/log"; '
    'trap \'echo "term $(date +%s.%N) $$" >>"$d/log"; exit 143\' TERM; '
    'sleep "$2" & wait $!; '
    'echo "end $(date +%s.%N) $$ $3" >>"$d/log"; exit "$3"'
)


@dataclass
class ChaosConfig:
    runs: int = 500
    workers: int = 3
    capacity: int = 3
    tick_s: float = 0.4
    stop_grace_s: float = 1.0
    lease_ttl_ms: int = 3500
    offer_ttl_ms: int = 3500
    reconcile_grace_ms: int = 2500  # > stop grace + 1 s (decision 0004, rule 5)
    converge_every_s: float = 0.5
    max_active: int = 18  # Runs queued or running at once (the submitter waits beyond it)
    submit_every_s: float = 0.45  # the pace of queueing (faults go on while Runs are queued)
    cancel_share: float = 0.15
    # per request on an established connection (the proxy)
    p_lose_answer: float = 0.02
    p_cut_answer: float = 0.01
    p_stall: float = 0.01
    p_reset: float = 0.01
    stall_s: tuple[float, float] = (0.3, 1.5)
    fault_every_s: float = 6.0  # mean pause between Worker faults (exponential)
    drain_s: float = 60.0  # after the last Run was queued and every Worker is back
    seed: int | None = None

    @property
    def long_down_s(self) -> float:
        """A Worker kept down this long loses its Leases: TTL + reconcile grace + 1.5 s."""
        return self.lease_ttl_ms / 1000 + self.reconcile_grace_ms / 1000 + 1.5


# -- small process helpers ----------------------------------------------------------------------------


@contextlib.contextmanager
def child_subreaper() -> Iterator[None]:
    """Orphaned task runners of killed Workers become our children (reaped here, not zombies of PID 1)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    try:
        yield
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of a process, from /proc."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    rest = data[data.rfind(b")") + 1 :].split()
    return rest[0].decode(), int(rest[1])


def reap_orphans(keep: set[int]) -> None:
    """waitpid the zombie children of this process that no Popen tracks (adopted task runners)."""
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in keep:
            continue
        st = _stat(int(name))
        if st is not None and st[1] == me and st[0] == "Z":
            with contextlib.suppress(ChildProcessError):
                os.waitpid(int(name), os.WNOHANG)


def processes_under(root: Path) -> list[int]:
    """Live processes whose command line names the root folder (task runners and tasks of this run)."""
    found, me = [], os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            cmd = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        st = _stat(int(name))
        if str(root).encode() in cmd and st is not None and st[0] not in ("Z", "X"):
            found.append(int(name))
    return found


# -- the fault proxy ----------------------------------------------------------------------------------


@dataclass
class ProxyStats:
    connections: int = 0
    requests: int = 0  # requests on established connections (the ones a fault may hit)
    lost_answers: int = 0
    cut_answers: int = 0
    stalls: int = 0
    resets: int = 0
    answered_at: list[float] = field(default_factory=list)  # wall time of each answer relayed whole


class FaultProxy:
    """TCP between one Worker and the shell's worker port. The TLS stream is opaque here, so a
    request is a run of client→server bytes and its answer the server→client bytes that follow.
    Only requests from the third exchange of a connection on are faulted: the first two carry the
    TLS handshake and the session tickets the server sends after it, so an answer seen from then
    on is the shell's HTTP answer, written after its transaction committed."""

    def __init__(self, target_port: int, config: ChaosConfig, rng: random.Random) -> None:
        self.target_port = target_port
        self.cfg = config
        self.rng = rng
        self.stats = ProxyStats()
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.ensure_future(self._connection(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _pick(self) -> str | None:
        c, x = self.cfg, self.rng.random()
        for name, p in (("lose", c.p_lose_answer), ("cut", c.p_cut_answer), ("stall", c.p_stall), ("reset", c.p_reset)):
            if x < p:
                return name
            x -= p
        return None

    async def _connection(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        self.stats.connections += 1
        try:
            sreader, swriter = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            cwriter.close()
            return
        state: dict[str, Any] = {"last": None, "exchange": 0, "fault": None}
        done = asyncio.Event()

        def abort(reset: bool) -> None:
            if reset:
                sock = cwriter.get_extra_info("socket")
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            cwriter.transport.abort()
            swriter.transport.abort()
            done.set()

        async def client_to_server() -> None:
            while True:
                data = await creader.read(65536)
                if not data:
                    with contextlib.suppress(OSError):
                        swriter.write_eof()
                    return
                if state["last"] != "c":
                    state["last"] = "c"
                    state["exchange"] += 1
                    state["fault"] = None
                    if state["exchange"] >= 3:
                        self.stats.requests += 1
                        state["fault"] = self._pick()
                        if state["fault"] == "reset":  # the shell never sees this request
                            self.stats.resets += 1
                            abort(reset=True)
                            return
                swriter.write(data)
                await swriter.drain()

        async def server_to_client() -> None:
            while True:
                data = await sreader.read(65536)
                if not data:
                    with contextlib.suppress(OSError):
                        cwriter.write_eof()
                    return
                fault = None
                if state["last"] != "s":
                    state["last"] = "s"
                    fault, state["fault"] = state["fault"], None
                    if state["exchange"] >= 3:
                        self.stats.answered_at.append(time.time())
                if fault == "lose":  # the shell answered, so it committed: the answer never arrives
                    self.stats.lost_answers += 1
                    abort(reset=False)
                    return
                if fault == "cut":  # part of the answer, then the link drops
                    self.stats.cut_answers += 1
                    cwriter.write(data[: max(1, len(data) // 2)])
                    with contextlib.suppress(OSError, ConnectionError):
                        await asyncio.wait_for(cwriter.drain(), 1)
                    abort(reset=False)
                    return
                if fault == "stall":
                    self.stats.stalls += 1
                    await asyncio.sleep(self.rng.uniform(*self.cfg.stall_s))
                cwriter.write(data)
                await cwriter.drain()

        pumps = [asyncio.ensure_future(client_to_server()), asyncio.ensure_future(server_to_client())]
        try:
            waiter = asyncio.ensure_future(done.wait())
            pending: set[asyncio.Future[Any]] = {*pumps, waiter}
            while pumps[0] in pending or pumps[1] in pending:
                finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                if waiter in finished:
                    break
            waiter.cancel()
        except (OSError, ConnectionError):
            pass
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            for w in (cwriter, swriter):
                with contextlib.suppress(Exception):
                    w.close()


# -- Workers ------------------------------------------------------------------------------------------


@dataclass
class Fault:
    kind: str  # kill | kill_long | stop | journal
    worker: int
    start: float  # wall time
    end: float = math.inf  # wall time the Worker was back (its first answer after the fault)


@dataclass
class WorkerSlot:
    index: int
    worker_id: str
    folder: Path
    config: Path
    proxy: FaultProxy
    popen: subprocess.Popen[bytes] | None = None
    busy: bool = False  # a fault is in progress
    starts: int = 0

    @property
    def journal(self) -> Path:
        return self.folder / "inbox.sqlite"

    @property
    def work_dir(self) -> Path:
        return self.folder / "runs"

    @property
    def log(self) -> Path:
        return self.folder / "worker.log"

    def start(self) -> None:
        self.starts += 1
        with self.log.open("ab") as log:
            log.write(f"--- start {self.starts} at {time.time():.3f}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "qinglong.worker", "run", "--config", str(self.config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO,
            )

    def kill(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.kill()
        if self.popen is not None:
            self.popen.wait()

    def signal(self, signum: int) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signum)


# -- the engine ---------------------------------------------------------------------------------------


@dataclass
class RunSpec:
    index: int
    kind: str  # ok | ok_long | fail | timeout
    sleep_s: float
    code: int
    max_attempts: int
    timeout_ms: int | None
    folder: Path
    cancel_after_s: float | None
    task_id: str = ""
    run_id: str = ""
    cancel: dict[str, Any] | None = None  # {sent, received, http, status, runStatus}


class Chaos:
    def __init__(self, env: Env, database: str, config: ChaosConfig, root: Path) -> None:
        self.env = env
        self.database = database
        self.cfg = config
        self.root = root
        seed = config.seed if config.seed is not None else int.from_bytes(os.urandom(4), "big")
        self.seed = seed
        self.rng = random.Random(seed)  # noqa: S311 - fault timing, not secrets
        self.faults: list[Fault] = []
        self.specs: list[RunSpec] = []
        self.slots: list[WorkerSlot] = []
        self.shell: ShellProcess | None = None
        self.converge_calls = 0
        self.converge_errors = 0
        self.terminal = 0
        self.journal_fail_closed: bool | None = None
        self.requests_after_fail_closed: int | None = None
        self.api_errors = 0
        self.leftover_processes = 0
        self._fault_tasks: list[asyncio.Task[None]] = []
        self._stop_faults = asyncio.Event()

    # -- setup --

    def dsn(self, user: str = "postgres") -> str:
        return self.env.dsn(self.database, user)

    def setup(self) -> None:
        cfg = self.cfg
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(
                "update ql.settings set lease_ttl_ms = %s, offer_ttl_ms = %s", (cfg.lease_ttl_ms, cfg.offer_ttl_ms)
            )
        dsn = self.dsn()
        with admin.transaction(dsn) as tx:
            self.project = str(tx.call("project_create_v1", "chaos")["projectId"])
            self.token = os.urandom(24).hex()
            subject = tx.call("subject_create_v1", "user", "chaos-operator", token_digest(self.token))["subjectId"]
            tx.call("role_binding_set_v1", self.project, subject, "operator", True)
        certs = self.env.certs
        for i in range(cfg.workers):
            worker_id = str(uuid.uuid4())
            folder = self.root / f"worker-{i}"
            folder.mkdir(parents=True)
            issued = pki.issue_worker(certs, worker_id, name=f"chaos-{i}")
            with admin.transaction(dsn) as tx:
                tx.call("worker_enroll_v1", worker_id, f"chaos-{i}", "default", issued.fingerprint)
            slot = WorkerSlot(i, worker_id, folder, folder / "worker.toml", FaultProxy(0, cfg, self.rng))
            slot.config.write_text(
                f'origin = "https://127.0.0.1:{{port}}"\nworker_id = "{worker_id}"\ngeneration = 1\n'
                f"capacity = {cfg.capacity}\n"
                f'certificate = "{issued.certificate}"\nkey = "{issued.key}"\ntrust_anchors = "{certs}/ca.crt"\n'
                f'journal = "{slot.journal}"\nwork_dir = "{slot.work_dir}"\ntick_seconds = {cfg.tick_s}\n'
                f"page_size = 16\nshutdown_seconds = 5.0\nstop_grace_seconds = {cfg.stop_grace_s}\n"
                + ("allow_root_tasks = true\n" if os.geteuid() == 0 else "")  # benchmarks run as root here
            )
            self.slots.append(slot)
        self._plan_runs()
        with admin.transaction(dsn) as tx:
            for spec in self.specs:
                plan: dict[str, Any] = {
                    "argv": [
                        "sh",
                        "-c",
                        TASK_SCRIPT,
                        "chaos-task",
                        str(spec.folder),
                        f"{spec.sleep_s:.2f}",
                        str(spec.code),
                    ],
                    "maxAttempts": spec.max_attempts,
                    "retryBackoffMs": 200,
                }
                if spec.timeout_ms is not None:
                    plan["timeoutMs"] = spec.timeout_ms
                spec.task_id = str(tx.call("task_create_v1", self.project, f"chaos-{spec.index}", plan)["taskId"])

    def _plan_runs(self) -> None:
        rng, cfg = self.rng, self.cfg
        tasks = self.root / "tasks"
        for i in range(cfg.runs):
            x = rng.random()
            if x < 0.40:
                kind, sleep_s, code, timeout = "ok", rng.uniform(0.1, 0.8), 0, None
            elif x < 0.60:
                kind, sleep_s, code, timeout = "ok_long", rng.uniform(2.0, 4.5), 0, None
            elif x < 0.82:
                kind, sleep_s, code, timeout = "fail", rng.uniform(0.1, 0.6), 1, None
            else:
                kind, sleep_s, code, timeout = "timeout", 30.0, 0, rng.randint(600, 1500)
            attempts = rng.choice((1, 2, 3)) if kind != "timeout" else rng.choice((1, 2))
            cancel_after: float | None = None
            if rng.random() < cfg.cancel_share:
                cancel_after = 0.0 if rng.random() < 0.35 else rng.uniform(0.1, 4.0)
            folder = tasks / str(i)
            folder.mkdir(parents=True)
            self.specs.append(RunSpec(i, kind, sleep_s, code, attempts, timeout, folder, cancel_after))

    # -- the run --

    async def run(self) -> dict[str, Any]:
        cfg = self.cfg
        self.shell = ShellProcess(self.env, self.database, name="chaos-shell")
        await asyncio.to_thread(self.shell.start)
        self.api = UserApi(f"https://127.0.0.1:{self.shell.user_port}", self.token, self.env.ca())
        for slot in self.slots:
            slot.proxy.target_port = self.shell.worker_port
            await slot.proxy.start()
            slot.config.write_text(slot.config.read_text().replace("{port}", str(slot.proxy.port)))
            slot.start()
        say(f"chaos: shell pid {self.shell.pid}, {cfg.workers} Workers behind fault proxies, seed {self.seed}")
        started = time.monotonic()
        background = [
            asyncio.ensure_future(self._converge_loop()),
            asyncio.ensure_future(self._reaper()),
        ]
        faults = asyncio.ensure_future(self._fault_loop())
        cancels: list[asyncio.Task[None]] = []
        try:
            await self._submit_all(cancels)
            self._stop_faults.set()
            await faults
            await asyncio.gather(*cancels)
            drained_from = time.monotonic()
            say(f"chaos: {cfg.runs} Runs queued in {drained_from - started:.0f} s; draining (≤ {cfg.drain_s:.0f} s)")
            while time.monotonic() - drained_from < cfg.drain_s:
                if await asyncio.to_thread(self._count_terminal) >= cfg.runs:
                    break
                await asyncio.sleep(0.5)
            elapsed_s = time.monotonic() - started
        finally:
            self._stop_faults.set()
            if not faults.done():
                faults.cancel()
            for c in cancels:
                c.cancel()
            await self._shutdown()
            for task in background:
                task.cancel()
            await asyncio.gather(*background, faults, *cancels, return_exceptions=True)
        return await asyncio.to_thread(self.analyse, elapsed_s)

    async def _shutdown(self) -> None:
        for slot in self.slots:
            slot.signal(signal.SIGCONT)
            slot.signal(signal.SIGTERM)
        for slot in self.slots:
            if slot.popen is not None:
                try:
                    await asyncio.to_thread(slot.popen.wait, 10)
                except subprocess.TimeoutExpired:
                    slot.kill()
        for slot in self.slots:
            await slot.proxy.stop()
        if self.shell is not None:
            await asyncio.to_thread(self.shell.stop)
        # Tasks of this run that still live (none when every Run ended): ours to end, by pid.
        deadline = time.monotonic() + 10
        while (left := processes_under(self.root)) and time.monotonic() < deadline:  # noqa: ASYNC110 - /proc poll
            await asyncio.sleep(0.2)
        for pid in processes_under(self.root):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.leftover_processes = len(left)
        await asyncio.sleep(0.1)
        reap_orphans(self._tracked())

    def _tracked(self) -> set[int]:
        pids = {s.popen.pid for s in self.slots if s.popen is not None}
        if self.shell is not None and self.shell.pid is not None:
            pids.add(self.shell.pid)
        return pids

    async def _reaper(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            reap_orphans(self._tracked())

    def _count_terminal(self) -> int:
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            row = conn.execute(
                "select count(*) from ql.runs where status in ('succeeded', 'failed', 'cancelled', 'timed_out')"
            ).fetchone()
        assert row is not None
        self.terminal = int(row[0])
        return self.terminal

    async def _converge_loop(self) -> None:
        grace = self.cfg.reconcile_grace_ms
        conn = await psycopg.AsyncConnection.connect(self.dsn("ql_scheduler"), autocommit=True)
        try:
            while True:
                try:
                    await conn.execute("call ql_api.converge(64, 16, %s)", (grace,))
                    self.converge_calls += 1
                except psycopg.Error:
                    self.converge_errors += 1
                await asyncio.sleep(self.cfg.converge_every_s)
        finally:
            await conn.close()

    async def _submit_all(self, cancels: list[asyncio.Task[None]]) -> None:
        last_count = next_at = 0.0
        for spec in self.specs:
            while True:
                if time.monotonic() - last_count > 0.5:
                    await asyncio.to_thread(self._count_terminal)
                    last_count = time.monotonic()
                if spec.index - self.terminal < self.cfg.max_active:
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            next_at = time.monotonic() + self.cfg.submit_every_s
            spec.run_id = await self._enqueue(spec)
            if spec.cancel_after_s is not None:
                cancels.append(asyncio.ensure_future(self._cancel(spec)))
            if spec.index % 100 == 99:
                say(f"chaos: {spec.index + 1} Runs queued, {self.terminal} ended")

    async def _user(self, method: str, path: str, body: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
        for attempt in range(5):
            try:
                return await asyncio.to_thread(self.api.request, method, path, body)
            except Unreachable:
                self.api_errors += 1
                if attempt == 4:
                    raise
                await asyncio.sleep(0.2)
        raise AssertionError("unreachable")

    async def _enqueue(self, spec: RunSpec) -> str:
        body = {"schema": "qinglong/run-enqueue@v1", "mutationId": f"chaos-{spec.index}", "taskId": spec.task_id}
        _, answer = await self._user("POST", f"/api/v3/projects/{self.project}/runs", body)
        assert answer["status"] in ("enqueued", "already_enqueued"), answer
        return str(answer["runId"])

    async def _cancel(self, spec: RunSpec) -> None:
        assert spec.cancel_after_s is not None
        await asyncio.sleep(spec.cancel_after_s)
        body = {"schema": "qinglong/run-cancellation@v1", "mutationId": f"cancel-{spec.index}"}
        sent = time.time()
        try:
            http, answer = await self._user(
                "POST", f"/api/v3/projects/{self.project}/runs/{spec.run_id}/cancellation", body
            )
        except ApiError as exc:
            spec.cancel = {"sent": sent, "received": time.time(), "http": exc.status, "status": exc.code}
            return
        spec.cancel = {
            "sent": sent,
            "received": time.time(),
            "http": http,
            "status": answer.get("status"),
            "runStatus": answer.get("runStatus"),
        }

    # -- Worker faults --

    async def _fault_loop(self) -> None:
        """A fixed opening (so even a short run sees each kind), then faults at random moments."""
        opening = ["kill", "stop", "journal", "kill_long"]
        while not self._stop_faults.is_set():
            pause = self.rng.expovariate(1 / self.cfg.fault_every_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop_faults.wait(), pause)
            if self._stop_faults.is_set():
                break
            idle = [s for s in self.slots if not s.busy]
            if len(idle) < 2:  # at least one Worker stays up
                continue
            weights = (0.45, 0.2, 0.35)
            kind = opening.pop(0) if opening else self.rng.choices(("kill", "kill_long", "stop"), weights)[0]
            slot = self.rng.choice(idle)
            slot.busy = True
            self._fault_tasks.append(asyncio.ensure_future(self._fault(kind, slot)))
        await asyncio.gather(*self._fault_tasks)

    async def _back_after(self, slot: WorkerSlot, since: float, fault: Fault) -> None:
        """The fault ends when the Worker's first answer after `since` is relayed (it is back)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            answers = slot.proxy.stats.answered_at
            if answers and answers[-1] > since:
                fault.end = next(t for t in answers if t > since)
                return
            await asyncio.sleep(0.05)
        fault.end = time.time()

    async def _fault(self, kind: str, slot: WorkerSlot) -> None:
        cfg = self.cfg
        try:
            fault = Fault(kind, slot.index, time.time())
            self.faults.append(fault)
            if kind in ("kill", "kill_long"):
                await asyncio.to_thread(slot.kill)
                down = self.rng.uniform(0.2, 2.0) if kind == "kill" else cfg.long_down_s + self.rng.uniform(0, 2)
                await asyncio.sleep(down)
                restarted = time.time()
                slot.start()
                await self._back_after(slot, restarted, fault)
            elif kind == "stop":
                slot.signal(signal.SIGSTOP)
                await asyncio.sleep(self.rng.uniform(0.5, cfg.long_down_s + 1.5))
                resumed = time.time()
                slot.signal(signal.SIGCONT)
                await self._back_after(slot, resumed, fault)
            else:
                await self._journal_fault(slot, fault)
        finally:
            slot.busy = False

    async def _journal_fault(self, slot: WorkerSlot, fault: Fault) -> None:
        """Delete the journal under a running Worker: it must fail closed (log journal.replaced and
        call the control plane no more). Then kill it and restart it with a fresh journal."""
        offset = slot.log.stat().st_size
        slot.journal.unlink()
        deadline = time.monotonic() + 10 * self.cfg.tick_s + 5
        seen = False
        while time.monotonic() < deadline:
            if b"journal.replaced" in slot.log.read_bytes()[offset:]:
                seen = True
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(self.cfg.tick_s + 0.2)  # a tick in flight at the moment of detection ends
        before = slot.proxy.stats.requests
        await asyncio.sleep(3 * self.cfg.tick_s)
        self.journal_fail_closed = seen
        self.requests_after_fail_closed = slot.proxy.stats.requests - before
        await asyncio.to_thread(slot.kill)
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                Path(f"{slot.journal}{suffix}").unlink()  # noqa: ASYNC240 - three unlinks
        restarted = time.time()
        slot.start()
        await self._back_after(slot, restarted, fault)

    # -- the analysis --

    def analyse(self, elapsed_s: float) -> dict[str, Any]:
        offset_ns = time.time_ns() - boottime_ns()  # wall = boottime + offset
        db = self._read_database()
        launches = self._read_launches()
        faults_by_worker: dict[str, list[Fault]] = {}
        for f in self.faults:
            faults_by_worker.setdefault(self.slots[f.worker].worker_id, []).append(f)

        def faulted(worker_id: str | None, start: float, end: float) -> bool:
            return worker_id is None or any(
                f.start <= end and start <= f.end for f in faults_by_worker.get(worker_id, [])
            )

        def down_at(attempt: dict[str, Any]) -> bool:
            """Its Worker could not renew it when its Lease expired: the Worker was down (killed, frozen)
            at that instant, or the Attempt was claimed before its Worker's journal was deleted (the
            Worker restarted with a fresh journal knows nothing of it)."""
            if attempt["lease_expires_at_ms"] is None:
                return False
            instant, claimed = attempt["lease_expires_at_ms"] / 1000, attempt["claimed_at_ms"] / 1000
            return any(
                f.start <= instant <= f.end or (f.kind == "journal" and claimed <= f.start <= instant)
                for f in faults_by_worker.get(attempt["worker_id"], [])
            )

        counts = {
            "healthy_tasks_stopped": 0,
            "reruns_after_exit0": 0,
            "spawned_after_cancel": 0,
            "overlapping_executions": 0,
            "wrong_outcomes": 0,
            "ended_not_once": 0,
            "unmatched_executions": 0,
        }
        lags: list[float] = []
        executions_total = 0
        examples: dict[str, list[str]] = {k: [] for k in counts}

        def flag(key: str, spec: RunSpec, detail: str) -> None:
            counts[key] += 1
            if len(examples[key]) < 5:
                examples[key].append(f"run {spec.index} {spec.run_id} ({spec.kind}): {detail}")

        for spec in self.specs:
            row = db["runs"].get(spec.run_id)
            attempts = db["attempts"].get(spec.run_id, [])
            execs = parse_task_log(spec.folder / "log")
            executions_total += len(execs)
            # which attempt (offer, Worker) each execution belongs to: its parent is the runner wrapper
            for ex in execs:
                launch = pick_launch(launches.get(ex.ppid, []), ex.start)
                if launch is None:
                    flag("unmatched_executions", spec, f"pid {ex.pid}: no runner launch with pid {ex.ppid}")
                    continue
                ex.launch = launch
                ex.attempt = db["by_offer"].get(launch.offer_id)
                if ex.end is None and launch.status_mtime is not None:
                    ex.end = launch.status_mtime
                if launch.lease_expiry_ns is not None and ex.end is not None:
                    lag = (ex.end * 1e9 - offset_ns - launch.lease_expiry_ns) / 1e9
                    if lag > 0:
                        lags.append(lag)
            # overlaps: a flock refused, or two executions' lifetimes intersect
            for ex in execs:
                if ex.kind == "overlap":
                    flag("overlapping_executions", spec, f"flock refused at {ex.start:.3f}")
            lives = sorted(
                (ex.start, ex.end if ex.end is not None else math.inf) for ex in execs if ex.kind != "overlap"
            )
            for (_, e1), (s2, _) in itertools.pairwise(lives):
                if s2 < e1:
                    flag("overlapping_executions", spec, f"started {s2:.3f} before the previous ended {e1:.3f}")
            intent_s = (
                None if row is None or row["cancel_requested_at_ms"] is None else row["cancel_requested_at_ms"] / 1000
            )
            # healthy tasks stopped: died by a signal, no intent yet, its Worker never faulted meanwhile
            for ex in execs:
                if ex.kind != "start" or ex.code is not None:
                    continue
                died = ex.term if ex.term is not None else ex.end if ex.end is not None else time.time()
                if intent_s is not None and died >= intent_s - 0.001:
                    continue
                worker = None if ex.attempt is None else ex.attempt["worker_id"]
                if not faulted(worker, ex.start, died):
                    flag("healthy_tasks_stopped", spec, f"pid {ex.pid} died at {died:.3f} (worker {worker})")
            # reruns after exit 0 (unless its Lease expired while its Worker was down)
            for ex in execs:
                if ex.code != 0 or ex.end is None:
                    continue
                later = [e for e in execs if e.start > ex.end and e.kind == "start"]
                if not later:
                    continue
                att = ex.attempt
                excused = att is not None and att["status"] == "lost" and down_at(att)
                if not excused:
                    flag("reruns_after_exit0", spec, f"exit 0 at {ex.end:.3f}, then {len(later)} more start(s)")
            # starts after a cancel accepted while the Run had not started
            c = spec.cancel
            if (
                c is not None
                and c.get("status") == "accepted"
                and c.get("runStatus") in ("queued", "retry_wait", "lost")
            ):
                for ex in execs:
                    if ex.kind == "start" and ex.start > c["sent"]:
                        flag("spawned_after_cancel", spec, f"started {ex.start - c['sent']:.3f} s after the cancel")
            # the outcome its task and its users caused
            if row is None or row["status"] not in TERMINAL:
                continue  # stuck: counted below
            expected = self._expected(spec, attempts, down_at)
            if row["status"] not in expected:
                flag("wrong_outcomes", spec, f"{row['status']}, expected {sorted(expected)}; attempts "
                     + ", ".join(f"{a['attempt_no']}:{a['status']}/{a['exit_code']}/{a['error_code']}"
                                 for a in attempts))  # fmt: skip
            if db["ends"].get(spec.run_id, 0) != 1:
                flag("ended_not_once", spec, f"{db['ends'].get(spec.run_id, 0)} run end events")
        stuck = [s for s in self.specs if s.run_id not in db["runs"] or db["runs"][s.run_id]["status"] not in TERMINAL]
        proxies = [s.proxy.stats for s in self.slots]
        kinds = [f.kind for f in self.faults]
        statuses: dict[str, int] = {}
        for r in db["runs"].values():
            statuses[r["status"]] = statuses.get(r["status"], 0) + 1
        cancels = [s.cancel for s in self.specs if s.cancel is not None]
        result: dict[str, Any] = {
            "runs": len([s for s in self.specs if s.run_id]),
            "lost_answers_injected": sum(p.lost_answers for p in proxies),
            "worker_kills": kinds.count("kill") + kinds.count("kill_long") + kinds.count("journal"),
            "healthy_tasks_stopped": counts["healthy_tasks_stopped"],
            "reruns_after_exit0": counts["reruns_after_exit0"],
            "spawned_after_cancel": counts["spawned_after_cancel"],
            "overlapping_executions": counts["overlapping_executions"],
            "max_stop_lag_after_local_expiry_s": round(max(lags), 3) if lags else 0.0,
            "stuck": len(stuck),
            "duplicate_events": db["duplicate_events"],
            # what else was measured
            "wrong_outcomes": counts["wrong_outcomes"],
            "ended_not_once": counts["ended_not_once"],
            "unmatched_executions": counts["unmatched_executions"],
            "stops_after_local_expiry": len(lags),
            "executions": executions_total,
            "attempts": sum(len(a) for a in db["attempts"].values()),
            "lost_attempts": sum(1 for a in db["by_offer"].values() if a["status"] == "lost"),
            "statuses": dict(sorted(statuses.items())),
            "kinds": {k: sum(1 for s in self.specs if s.kind == k) for k in ("ok", "ok_long", "fail", "timeout")},
            "cancels_sent": len(cancels),
            "cancels_accepted": sum(1 for c in cancels if c.get("status") == "accepted"),
            "cancels_accepted_before_start": sum(
                1 for c in cancels if c.get("status") == "accepted" and c.get("runStatus") in ("queued", "retry_wait")
            ),
            "requests_through_proxies": sum(p.requests for p in proxies),
            "cut_answers_injected": sum(p.cut_answers for p in proxies),
            "stalls_injected": sum(p.stalls for p in proxies),
            "resets_injected": sum(p.resets for p in proxies),
            "proxy_connections": sum(p.connections for p in proxies),
            "worker_faults": {k: kinds.count(k) for k in ("kill", "kill_long", "stop", "journal")},
            "journal_fail_closed": self.journal_fail_closed,
            "requests_after_fail_closed": self.requests_after_fail_closed,
            "worker_starts": sum(s.starts for s in self.slots),
            "converge_calls": self.converge_calls,
            "converge_errors": self.converge_errors,
            "user_api_retries": self.api_errors,
            "leftover_processes": self.leftover_processes,
            "seconds": round(elapsed_s, 1),
            "seed": self.seed,
            "config": {
                "workers": self.cfg.workers,
                "capacity": self.cfg.capacity,
                "tick_s": self.cfg.tick_s,
                "stop_grace_s": self.cfg.stop_grace_s,
                "lease_ttl_ms": self.cfg.lease_ttl_ms,
                "offer_ttl_ms": self.cfg.offer_ttl_ms,
                "reconcile_grace_ms": self.cfg.reconcile_grace_ms,
                "p_lose_answer": self.cfg.p_lose_answer,
                "p_cut_answer": self.cfg.p_cut_answer,
                "p_stall": self.cfg.p_stall,
                "p_reset": self.cfg.p_reset,
            },
            "examples": {k: v for k, v in examples.items() if v},
            "stuck_runs": [f"{s.index} {s.run_id} {db['runs'].get(s.run_id, {}).get('status')}" for s in stuck[:5]],
        }
        return result

    def _expected(
        self, spec: RunSpec, attempts: list[dict[str, Any]], down_at: Callable[[dict[str, Any]], bool]
    ) -> set[str]:
        c = spec.cancel
        if c is not None and c.get("status") == "accepted":
            return {"cancelled"}  # an intent always wins, over an exit code and over a retry
        if c is not None and c.get("status") == "already_requested":
            return {"timed_out"} if spec.kind == "timeout" else set()  # only a timeout intent came first
        expected = {"ok": "succeeded", "ok_long": "succeeded", "fail": "failed", "timeout": "timed_out"}[spec.kind]
        # An Attempt lost while its Worker was down (its Lease expired meanwhile) may spend the last try.
        lost_while_down = any(a["status"] == "lost" and down_at(a) for a in attempts)
        tries = [a for a in attempts if a["status"] != "abandoned"]  # an abandoned claim spends no try
        if spec.kind == "fail" and not lost_while_down and len(tries) != spec.max_attempts:
            return set()  # exit 1 must fail after exactly its attempts
        return {expected, "failed"} if lost_while_down else {expected}

    def _read_database(self) -> dict[str, Any]:
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            runs = {
                str(r[0]): {"status": str(r[1]), "cancel_requested_at_ms": r[2], "cancel_reason": r[3]}
                for r in conn.execute(
                    "select id, status::text, cancel_requested_at_ms, cancel_reason::text from ql.runs"
                ).fetchall()
            }
            attempts: dict[str, list[dict[str, Any]]] = {}
            by_offer: dict[str, dict[str, Any]] = {}
            for r in conn.execute(
                "select a.run_id, a.attempt_no, a.status::text, a.worker_id, a.offer_id, a.exit_code, a.error_code,"
                " l.expires_at_ms, a.claimed_at_ms"
                " from ql.run_attempts a left join ql.run_leases l on l.attempt_id = a.id"
                " order by a.run_id, a.attempt_no"
            ).fetchall():
                a = {
                    "attempt_no": r[1],
                    "status": r[2],
                    "worker_id": str(r[3]),
                    "offer_id": str(r[4]),
                    "exit_code": r[5],
                    "error_code": r[6],
                    "lease_expires_at_ms": r[7],
                    "claimed_at_ms": r[8],
                }
                attempts.setdefault(str(r[0]), []).append(a)
                by_offer[str(r[4])] = a
            ends = {
                str(r[0]): int(r[1])
                for r in conn.execute(
                    "select run_id, count(*) from ql.run_events where type = any(%s) group by run_id",
                    (list(RUN_END_EVENTS),),
                ).fetchall()
            }
            # the checks of tests/integration/db/factories.py: stream_faults and duplicate_events
            faults = conn.execute(
                "select r.id from ql.runs r left join ql.run_events e on e.run_id = r.id group by r.id"
                " having r.version <> 1 + r.event_sequence or r.event_sequence <> count(e.sequence)"
                " or coalesce(min(e.sequence), 1) <> 1 or coalesce(max(e.sequence), 0) <> count(e.sequence)"
            ).fetchall()
            dup = conn.execute(
                "select count(*) - count(distinct event_id), count(*) - count(distinct dedupe_key) from ql.run_events"
            ).fetchone()
            assert dup is not None
        return {
            "runs": runs,
            "attempts": attempts,
            "by_offer": by_offer,
            "ends": ends,
            "duplicate_events": len(faults) + int(dup[0]) + int(dup[1]),
        }

    def _read_launches(self) -> dict[int, list[Launch]]:
        """Every runner launch in every Worker's work folder, by the wrapper's pid."""
        found: dict[int, list[Launch]] = {}
        for slot in self.slots:
            if not slot.work_dir.exists():
                continue
            for identity in slot.work_dir.glob("*/*.identity.json"):
                try:
                    data = json.loads(identity.read_bytes())
                except (OSError, ValueError):
                    continue
                base = identity.with_name(identity.name.removesuffix(".identity.json"))
                lease = base.with_suffix(".lease")
                status = base.with_suffix(".status.json")
                expiry = None
                with contextlib.suppress(OSError, ValueError):
                    expiry = int(lease.read_text().strip())
                mtime = None
                with contextlib.suppress(OSError):
                    mtime = status.stat().st_mtime
                launch = Launch(identity.parent.name, identity.stat().st_mtime, expiry, mtime)
                found.setdefault(int(data["pid"]), []).append(launch)
        return found


@dataclass
class Launch:
    offer_id: str
    written: float  # the identity file's mtime (wall)
    lease_expiry_ns: int | None  # the dead-man's switch's last local expiry (CLOCK_BOOTTIME)
    status_mtime: float | None  # when the wrapper recorded the task's end (wall)


@dataclass
class Execution:
    kind: str  # start | overlap
    start: float
    pid: int
    ppid: int
    end: float | None = None
    code: int | None = None  # None: died by a signal (no `end` line)
    term: float | None = None
    launch: Launch | None = None
    attempt: dict[str, Any] | None = None


def parse_task_log(path: Path) -> list[Execution]:
    """The task's own record: `start T PID PPID`, `end T PID CODE`, `term T PID`, `overlap T PID PPID`."""
    out: list[Execution] = []
    by_pid: dict[int, Execution] = {}
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return out
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        what, t, pid = parts[0], float(parts[1]), int(parts[2])
        if what in ("start", "overlap"):
            ex = Execution(what, t, pid, int(parts[3]))
            out.append(ex)
            by_pid[pid] = ex
        elif what == "end" and pid in by_pid:
            by_pid[pid].end, by_pid[pid].code = t, int(parts[3])
        elif what == "term" and pid in by_pid:
            by_pid[pid].term = by_pid[pid].end = t
    return out


def pick_launch(candidates: list[Launch], started: float) -> Launch | None:
    """The launch of this wrapper pid whose identity was written last before the task started."""
    before = [c for c in candidates if c.written <= started + 0.01]
    return max(before, key=lambda c: c.written) if before else None


# -- entry points -------------------------------------------------------------------------------------


def run_chaos(env: Env, database: str, config: ChaosConfig, root: Path) -> dict[str, Any]:
    """Set up and run the engine on `database` (deployed, in env's cluster); the measured counts."""
    engine = Chaos(env, database, config, root)
    engine.setup()
    with child_subreaper():
        return asyncio.run(engine.run())


def run(env: Env, runs: int) -> Result:
    """Part (e) of `make bench`: the engine at full size on its own database of the bench cluster."""
    env.create_database("chaos")
    say(f"(e) chaos: {runs} Runs, 3 Workers behind fault proxies, kills, freezes, a deleted journal")
    root = env.root / "chaos"
    root.mkdir()
    config = ChaosConfig(runs=runs)
    counts = run_chaos(env, "chaos", config, root)
    record_json("chaos", counts)
    return Result(render(counts), summary(counts), {"chaos": counts})


ZEROS: Final = (
    "healthy_tasks_stopped",
    "reruns_after_exit0",
    "spawned_after_cancel",
    "overlapping_executions",
    "stuck",
    "duplicate_events",
    "wrong_outcomes",
    "ended_not_once",
)


def summary(c: dict[str, Any]) -> list[str]:
    zeros = ", ".join(f"{k} {c[k]}" for k in ZEROS)
    return [
        f"(e) chaos: {c['runs']} Runs in {c['seconds']:.0f} s, {c['lost_answers_injected']} lost answers, "
        f"{c['worker_kills']} Worker kills; {zeros}; max stop lag after local expiry "
        f"{c['max_stop_lag_after_local_expiry_s']:.2f} s"
    ]


def render(c: dict[str, Any]) -> str:
    cfg = c["config"]
    bound = cfg["tick_s"] + cfg["stop_grace_s"] + 1.0
    rows = [
        ["Runs", f"{c['runs']:,}", "queued through the user API, each its own Task"],
        ["lost answers injected", f"{c['lost_answers_injected']:,}", "answers cut after the shell committed"],
        ["Worker kills", f"{c['worker_kills']:,}",
         f"SIGKILL + restart: {c['worker_faults']['kill']} soon, "
         f"{c['worker_faults']['kill_long']} after > TTL + grace, "
         f"{c['worker_faults']['journal']} after its journal was deleted"],
        ["healthy tasks stopped", str(c["healthy_tasks_stopped"]), "must be 0"],
        ["reruns after exit 0", str(c["reruns_after_exit0"]), "must be 0"],
        ["spawned after cancel", str(c["spawned_after_cancel"]), "must be 0"],
        ["overlapping executions", str(c["overlapping_executions"]), "must be 0"],
        ["max stop lag after local expiry", f"{c['max_stop_lag_after_local_expiry_s']:.2f} s",
         f"over {c['stops_after_local_expiry']} tasks that outlived their local expiry; bound tick + stop grace + 1 s "
         f"= {bound:.1f} s"],
        ["stuck", str(c["stuck"]), "must be 0"],
        ["duplicate events", str(c["duplicate_events"]), "must be 0"],
        ["wrong outcomes", str(c["wrong_outcomes"]), "must be 0"],
        ["Runs not ended exactly once", str(c["ended_not_once"]), "must be 0"],
    ]  # fmt: skip
    other = [
        ["final statuses", ", ".join(f"{k} {v}" for k, v in c["statuses"].items())],
        ["Run kinds", ", ".join(f"{k} {v}" for k, v in c["kinds"].items())],
        ["executions · Attempts · lost Attempts", f"{c['executions']} · {c['attempts']} · {c['lost_attempts']}"],
        ["cancels sent · accepted · accepted before the start",
         f"{c['cancels_sent']} · {c['cancels_accepted']} · {c['cancels_accepted_before_start']}"],
        ["requests through the proxies · connections",
         f"{c['requests_through_proxies']:,} · {c['proxy_connections']:,}"],
        ["answers cut midway · stalls · resets",
         f"{c['cut_answers_injected']} · {c['stalls_injected']} · {c['resets_injected']}"],
        ["Worker freezes (SIGSTOP/SIGCONT)", str(c["worker_faults"]["stop"])],
        ["deleted journal: failed closed · requests after",
         f"{c['journal_fail_closed']} · {c['requests_after_fail_closed']}"],
        ["convergence calls · errors", f"{c['converge_calls']} · {c['converge_errors']}"],
        ["settings", ", ".join(f"{k}={v}" for k, v in cfg.items())],
        ["seed · seconds", f"{c['seed']} · {c['seconds']}"],
    ]  # fmt: skip
    return (
        "## (e) Chaos on real parts\n\n"
        "PostgreSQL (fsync on), the shell as its own process and "
        f"{cfg['workers']} `qinglong-worker run` processes, each behind its own TCP fault proxy that loses answers "
        "after the shell committed, cuts answers midway, stalls answers and resets connections; Workers are "
        "SIGKILLed and restarted (some only after the Lease TTL + the reconciliation grace), frozen with SIGSTOP, "
        "and one journal is deleted under its Worker. `CALL ql_api.converge(…)` runs every 0.5 s as ql_scheduler. "
        "Every count below is measured from the tasks' own records (flock, start/end lines), the runner "
        "wrappers' files and the database's rows; definitions in bench/README.md. The same engine runs short in "
        "tests/integration/test_chaos.py, which asserts the zeros.\n\n"
        f"{table(['count', 'measured', ''], rows)}\n\n{table(['also measured', ''], other)}\n"
    )


if __name__ == "__main__":  # pragma: no cover - a manual entry point for one chaos run
    from bench.common import environment

    with environment() as bench_env:
        print(json.dumps(run(bench_env, int(sys.argv[1]) if len(sys.argv) > 1 else 50).data, indent=2))
