"""What every benchmark shares: one fresh PostgreSQL cluster with fsync on, the schema deployed
once by sqitch into a template database, a PKI, the real shell as its own process, enrolled
simulated Workers, set-based fixture rows, CPU meters and Markdown tables.

Touches: a temporary folder under /tmp (removed at the end), the processes it starts (postgres,
the shell, pgbench, helper children) and loopback ports. Fixture rows (projects, tasks, queued Runs,
intents) are written by the superuser, set-based; what is measured goes through ql_api as
ql_runtime or ql_scheduler, or through the shell.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import platform
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from qinglong.cli import pki
from qinglong.db import sqitch
from qinglong.devdb import Cluster, server_bindir

REPO = Path(__file__).resolve().parent.parent
TEMPLATE = "ql_template"
# Idle simulated Workers must not be fenced between phases (an hour-long session, offer and Lease TTL: an
# Attempt ACKed running keeps its offer's expiry until its first renewal, and (a) holds 128 of them while
# its earlier phases renew fewer); a TTL is a number a renewal writes, it does not change the work it does.
BENCH_SETTINGS = {"session_ttl_ms": 3_600_000, "offer_ttl_ms": 3_600_000, "lease_ttl_ms": 3_600_000}

# track_wal_io_timing: pg_stat_wal times each WAL fsync (for the fsync columns); fsync stays on.
PG_SETTINGS = {
    "track_wal_io_timing": "on",
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track": "top",
    "pg_stat_statements.max": "5000",
}

_STARTED = time.monotonic()


def say(text: str) -> None:
    """One progress line on stdout, stamped with the seconds since the command started."""
    print(f"[{time.monotonic() - _STARTED:6.1f}s] {text}", flush=True)


def elapsed() -> float:
    return time.monotonic() - _STARTED


# -- numbers and tables ---------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by nearest rank; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def fmt(value: float | int | None, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}f}"


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0 or math.isnan(a) or math.isnan(b):
        return "—"
    return f"{a / b:.2f}x"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


@dataclass
class Result:
    """One benchmark's section of RESULTS.md, its one-line summaries, and its numbers."""

    markdown: str
    summary: list[str]
    data: dict[str, Any] = field(default_factory=dict)


WARMUP_S = 1.0


@dataclass
class Phase:
    """One measured window: completed calls, their latencies (s), errors, CPU split."""

    name: str
    clients: int
    seconds: float
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    cpu: dict[str, float] | None = None
    count: int | None = None  # when set: completed operations counted without their latencies

    @property
    def done(self) -> int:
        return len(self.latencies) if self.count is None else self.count

    @property
    def rate(self) -> float:
        return self.done / self.seconds

    def ms(self, q: float) -> float:
        return percentile(self.latencies, q) * 1000


class Window:
    """Warm-up, then a measured window; calls that end inside it count."""

    def __init__(self, seconds: float) -> None:
        now = time.perf_counter()
        self.start = now + WARMUP_S
        self.end = self.start + seconds

    def record(self, phase: Phase, started: float, ended: float) -> None:
        if self.start <= ended <= self.end:
            phase.latencies.append(ended - started)

    async def meter(self, meter: CpuMeter) -> dict[str, float]:
        """CPU used by the processes of `meter` over exactly the measured window."""
        await asyncio.sleep(max(0.0, self.start - time.perf_counter()))
        meter.start()
        await asyncio.sleep(max(0.0, self.end - time.perf_counter()))
        return meter.stop()


# -- processes and CPU ----------------------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_ticks(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[11]) + int(fields[12])  # utime + stime (fields 14 and 15)


def children_of(pid: int) -> list[int]:
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[1] == str(pid):
            found.append(int(entry.name))
    return found


def _machine_busy() -> tuple[int, int, int]:
    """(busy, steal, total) jiffies of all cores since boot (guest time is inside user time)."""
    parts = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]][:8]
    idle, steal = parts[3] + parts[4], parts[7] if len(parts) > 7 else 0
    total = sum(parts)
    return total - idle - steal, steal, total


def status_kb(pid: int | str, key: str) -> int | None:
    """A `kB` line of /proc/<pid>/status (VmRSS, VmHWM, RssAnon…), or None."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


@dataclass
class CpuMeter:
    """CPU used over a window, in cores (1.0 = one core busy), by process groups:
    `self` (this load generator), `shell` (one pid) and `postgres` (the postmaster's children that
    live through the window); `rest` is everything else on the machine (cores), `machine` the busy
    fraction of all cores and `steal` the fraction the hypervisor took."""

    shell_pid: int | None
    postmaster_pid: int | None
    wal_dsn: str | None = None  # with it: WAL fsyncs over the window, from pg_stat_wal
    _start: dict[str, dict[int, int]] = field(default_factory=dict)
    _wal0: tuple[int, float] = (0, 0.0)
    _t0: float = 0.0
    _busy0: tuple[int, int, int] = (0, 0, 0)

    def _groups(self) -> dict[str, list[int]]:
        groups = {"self": [os.getpid()]}
        if self.shell_pid is not None:  # with its children: a shell of several processes (shell.toml `processes`)
            groups["shell"] = [self.shell_pid, *children_of(self.shell_pid)]
        if self.postmaster_pid is not None:
            groups["postgres"] = children_of(self.postmaster_pid)
        return groups

    def _sample(self) -> dict[str, dict[int, int]]:
        out: dict[str, dict[int, int]] = {}
        for name, pids in self._groups().items():
            out[name] = {pid: t for pid in pids if (t := _cpu_ticks(pid)) is not None}
        return out

    def _wal(self) -> tuple[int, float]:
        assert self.wal_dsn is not None
        with psycopg.connect(self.wal_dsn, autocommit=True) as conn:
            row = conn.execute("select wal_sync, wal_sync_time from pg_stat_wal").fetchone()
        assert row is not None
        return int(row[0]), float(row[1])

    def start(self) -> None:
        if self.wal_dsn is not None:
            self._wal0 = self._wal()
        self._start = self._sample()
        self._t0 = time.monotonic()
        self._busy0 = _machine_busy()

    def stop(self) -> dict[str, float]:
        end = self._sample()
        wall = time.monotonic() - self._t0
        busy1 = _machine_busy()
        result: dict[str, float] = {}
        for name, pids in end.items():
            before = self._start.get(name, {})
            ticks = sum(t - before[pid] for pid, t in pids.items() if pid in before)
            result[name] = ticks / _TICK / wall if wall > 0 else math.nan
        if self.wal_dsn is not None:
            syncs, ms = self._wal()
            result["wal_syncs"] = (syncs - self._wal0[0]) / wall
            result["wal_sync_ms"] = (
                (ms - self._wal0[1]) / (syncs - self._wal0[0]) if syncs > self._wal0[0] else math.nan
            )
        total = busy1[2] - self._busy0[2]
        if total:
            result["machine"] = (busy1[0] - self._busy0[0]) / total
            result["steal"] = (busy1[1] - self._busy0[1]) / total
            cores = result["machine"] * (os.cpu_count() or 1)
            result["rest"] = max(0.0, cores - sum(v for k, v in result.items() if k in ("self", "shell", "postgres")))
        return result

    def stop_as(self, shell_name: str) -> dict[str, float]:
        """stop(), with the `shell` group renamed (e.g. to the pgbench client it metered)."""
        result = self.stop()
        if "shell" in result:
            result[shell_name] = result.pop("shell")
        return result


CONTENDED_REST = 0.25  # cores other work took during a window
CONTENDED_STEAL = 0.10  # share of all cores the hypervisor took


def contended(cpu: Mapping[str, float] | None) -> bool:
    """Did other work on the machine, or the hypervisor, take a noticeable share of the window?"""
    if not cpu:
        return False
    return cpu.get("rest", 0.0) >= CONTENDED_REST or cpu.get("steal", 0.0) >= CONTENDED_STEAL


CONTENDED_NOTE = (
    f"⚠ marks a window in which other work on the machine took ≥ {CONTENDED_REST} cores or the hypervisor stole "
    f"≥ {CONTENDED_STEAL * 100:.0f} % of the cores: its numbers are contended, compare them with care."
)


def cpu_cell(cpu: Mapping[str, float] | None) -> str:
    """`gen 0.90 / shell 0.70 / pg 0.40 / rest 0.05 · 98 % (steal 1 %)`: cores per group, then the
    machine's busy share of all cores and the share the hypervisor stole."""
    if not cpu:
        return "—"
    parts = []
    for key, label in (
        ("self", "gen"),
        ("shell", "shell"),
        ("pgbench", "pgbench"),
        ("postgres", "pg"),
        ("rest", "rest"),
    ):
        if key in cpu:
            parts.append(f"{label} {cpu[key]:.2f}")
    busy = f"{cpu.get('machine', math.nan) * 100:.0f} %"
    mark = "⚠ " if contended(cpu) else ""
    return mark + " / ".join(parts) + f" · {busy} (steal {cpu.get('steal', math.nan) * 100:.0f} %)"


def wal_cell(cpu: Mapping[str, float] | None, rate: float | None = None) -> str:
    """`1,234/s · 0.81 ms` WAL fsyncs per second and their mean duration (pg_stat_wal, approximate:
    backends report at most once a second), then commits per fsync when `rate` is commits/s."""
    if not cpu or "wal_syncs" not in cpu:
        return "—"
    text = f"{cpu['wal_syncs']:,.0f}/s · {cpu['wal_sync_ms']:.2f} ms"
    if rate and cpu["wal_syncs"]:
        text += f" · {rate / cpu['wal_syncs']:.1f}"
    return text


def per_call(cpu: Mapping[str, float] | None, key: str, rate: float) -> str:
    """CPU microseconds a group of processes spent per operation (cores / operations per second)."""
    if not cpu or key not in cpu or not rate:
        return "—"
    return f"{cpu[key] / rate * 1e6:,.0f}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_process(proc: subprocess.Popen[Any], timeout: float = 30.0) -> None:
    """SIGTERM one process we started, then SIGKILL it after `timeout`."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- the machine ----------------------------------------------------------------------------------


def machine() -> dict[str, str]:
    mem_kb = status_meminfo("MemTotal")
    cpu_model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    pg = subprocess.run([str(server_bindir() / "postgres"), "--version"], capture_output=True, text=True, check=False)
    return {
        "nproc": str(os.cpu_count()),
        "cpu": cpu_model or platform.processor() or "unknown",
        "memory": f"{(mem_kb or 0) / 1024 / 1024:.1f} GiB",
        "kernel": f"{platform.system()} {platform.release()}",
        "postgresql": pg.stdout.strip(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
    }


def status_meminfo(key: str) -> int | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return None


# -- the environment ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Identity:
    """An enrolled simulated Worker: its id and its own client certificate."""

    worker_id: str
    certificate: Path
    key: Path
    fingerprint: bytes


@dataclass
class Env:
    root: Path
    cluster: Cluster
    certs: Path
    secret: bytes
    secret_file: Path
    settings: dict[str, str] = field(default_factory=dict)
    shell: ShellProcess | None = None

    def dsn(self, db: str, user: str = "postgres") -> str:
        return f"host={self.cluster.host} port={self.cluster.port} user={user} dbname={db}"

    def create_database(self, name: str, template: str = TEMPLATE) -> None:
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute(
                sql.SQL("create database {} template {}").format(sql.Identifier(name), sql.Identifier(template))
            )

    def vacuum_analyze(self, name: str) -> None:
        """What autovacuum would have done by the steady state: fresh statistics, visibility map."""
        with psycopg.connect(self.dsn(name), autocommit=True) as conn:
            conn.execute("vacuum analyze")

    def database_size(self, name: str) -> int:
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            row = conn.execute("select pg_database_size(%s)", (name,)).fetchone()
        assert row is not None
        return int(row[0])

    def meter(self, pid: int | None) -> CpuMeter:
        """A CPU meter of this load generator, `pid` (the shell, or pgbench) and PostgreSQL, with WAL fsyncs."""
        return CpuMeter(pid, self.cluster.pid, self.dsn("postgres"))

    def ca(self) -> Path:
        return self.certs / "ca.crt"

    def client_context(self, who: Identity) -> ssl.SSLContext:
        """TLS 1.3 only, this Worker's certificate, the deployment CA (as the Worker client does)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.maximum_version = ssl.TLSVersion.TLSv1_3
        ctx.load_verify_locations(cafile=self.ca())
        ctx.load_cert_chain(who.certificate, who.key)
        return ctx


def new_env(root: Path, cluster: Cluster, settings: dict[str, str] | None = None) -> Env:
    """An Env over a running cluster: a CA, the shell's server certificate and a cluster secret under `root`."""
    certs = root / "pki"
    pki.init_ca(certs)
    pki.issue_server(certs, ["127.0.0.1"])
    secret_file = root / "cluster.secret"
    secret = os.urandom(32).hex().encode()
    secret_file.write_bytes(secret)
    secret_file.chmod(0o600)
    return Env(root, cluster, certs, secret, secret_file, settings or {})


@contextlib.contextmanager
def environment() -> Iterator[Env]:
    """A fresh cluster (fsync on, no pg_cron: nothing converges behind the benchmarks' back), the
    schema in the template database, a CA and the shell's certificate. Everything goes at the end."""
    root = Path(tempfile.mkdtemp(prefix="qinglong-bench-", dir="/tmp"))
    root.chmod(0o755)
    # pg_stat_statements (preloaded; its view lives in the `postgres` database): the per-call-type tables.
    cluster = Cluster(root / "pg", fsync=True, preload_cron=False, settings=PG_SETTINGS)
    env: Env | None = None
    try:
        say(f"PostgreSQL in {root / 'pg'} (fsync on): initdb and start")
        cluster.start()
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            conn.execute("create extension pg_stat_statements")
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(TEMPLATE)))
            shown = conn.execute(
                "select name, setting from pg_settings where name = any(%s) order by name",
                (
                    [
                        "fsync",
                        "synchronous_commit",
                        "full_page_writes",
                        "wal_sync_method",
                        "shared_buffers",
                        "max_connections",
                        "wal_level",
                        "track_wal_io_timing",
                        "shared_preload_libraries",
                    ],
                ),
            ).fetchall()
        say("sqitch deploy into the template database")
        subprocess.run(
            sqitch("deploy", "--quiet", cluster.sqitch_target(TEMPLATE)),
            check=True,
            capture_output=True,
        )
        with psycopg.connect(cluster.dsn(TEMPLATE), autocommit=True) as conn:
            assignments = sql.SQL(", ").join(
                sql.SQL("{} = {}").format(sql.Identifier(k), sql.Literal(v)) for k, v in BENCH_SETTINGS.items()
            )
            conn.execute(sql.SQL("update ql.settings set {}").format(assignments))
        env = new_env(root, cluster, {str(k): str(v) for k, v in shown})
        yield env
    finally:
        if env is not None and env.shell is not None:
            env.shell.stop()
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


# -- the shell as its own process -----------------------------------------------------------------


class ShellProcess:
    """`python -m qinglong.cli shell serve --config …` over one database, logging to a file."""

    def __init__(self, env: Env, database: str, pool_size: int = 4, name: str = "shell", processes: int = 1) -> None:
        self.env = env
        self.pool_size = pool_size
        self.processes = processes
        self.worker_port, self.user_port, self.admin_port = free_port(), free_port(), free_port()
        self.config = env.root / f"{name}.toml"
        self.log = env.root / f"{name}.log"
        c = env.certs
        self.config.write_text(
            (f"processes = {processes}\n" if processes > 1 else "")
            + f'[database]\ndsn = "{env.dsn(database, "ql_runtime")}"\npool_size = {pool_size}\n'
            f'[secret]\ncluster_secret_file = "{env.secret_file}"\n'
            f'[worker_listener]\nhost = "127.0.0.1"\nport = {self.worker_port}\n'
            f'certificate = "{c}/server.crt"\nkey = "{c}/server.key"\nclient_ca = "{c}/ca.crt"\n'
            f'[user_listener]\nhost = "127.0.0.1"\nport = {self.user_port}\n'
            f'certificate = "{c}/server.crt"\nkey = "{c}/server.key"\n'
            f'[admin_listener]\nhost = "127.0.0.1"\nport = {self.admin_port}\n'
        )
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def origin(self) -> str:
        return f"https://127.0.0.1:{self.worker_port}"

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def start(self) -> None:
        argv = [sys.executable, "-m", "qinglong.cli", "shell", "serve", "--config", str(self.config)]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        deadline = time.monotonic() + 30
        while not self._healthy():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the shell did not become healthy:\n{tail}")
            time.sleep(0.1)

    def _healthy(self) -> bool:
        try:
            url = f"http://127.0.0.1:{self.admin_port}/healthz"
            with urllib.request.urlopen(url, timeout=1) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            self.proc = None

    def restart(self) -> None:
        """A fresh process, hence fresh pool connections: after seeding and ANALYZE no measured connection
        keeps plans made while the tables were empty."""
        self.stop()
        self.start()


# -- fixtures -------------------------------------------------------------------------------------


def enroll(env: Env, conn: psycopg.Connection[Any], count: int, pool: str, prefix: str) -> list[Identity]:
    """`count` Workers of `pool`, each with its own client certificate, enrolled by the operator
    function (generation 1)."""
    out: list[Identity] = []
    for i in range(count):
        worker_id = str(uuid.uuid4())
        issued = pki.issue_worker(env.certs, worker_id, name=f"{prefix}-{i}")
        row = conn.execute(
            "select ql_api.worker_enroll_v1(%s, %s, %s, %s)", (worker_id, f"{prefix}-{i}", pool, issued.fingerprint)
        ).fetchone()
        assert row is not None and row[0]["status"] == "enrolled", row
        out.append(Identity(worker_id, issued.certificate, issued.key, issued.fingerprint))
    return out


@dataclass(frozen=True)
class TaskRef:
    project_id: str
    task_id: str
    revision_id: str
    pool: str


def make_task(conn: psycopg.Connection[Any], project: str, name: str, plan: dict[str, Any]) -> TaskRef:
    """A Project (created once per name) and a Task whose current revision has `plan` (operator functions)."""
    row = conn.execute("select ql_api.project_create_v1(%s)", (project,)).fetchone()
    assert row is not None
    project_id = str(row[0]["projectId"])
    row = conn.execute("select ql_api.task_create_v1(%s, %s, %s)", (project_id, name, Jsonb(plan))).fetchone()
    assert row is not None and row[0]["status"] in ("created", "revised"), row
    return TaskRef(project_id, str(row[0]["taskId"]), str(row[0]["revisionId"]), str(plan.get("pool", "default")))


def queue_runs(conn: psycopg.Connection[Any], task: TaskRef, count: int) -> None:
    """`count` queued Runs of the task's current revision, each with its run.queued event (set-based,
    one transaction), queued in insertion order."""
    with conn.transaction():
        conn.execute(
            "create temporary table new_runs on commit drop as"
            " with ins as (insert into ql.runs (project_id, task_id, task_revision_id, pool, status,"
            "   queued_at_ms, created_at_ms)"
            " select t.project_id, t.task_id, t.id, %s, 'created', ql.now_ms() + g, ql.now_ms()"
            " from ql.task_execution_revisions t cross join generate_series(1, %s) g where t.id = %s"
            " returning id) select id from ins",
            (task.pool, count, task.revision_id),
        )
        row = conn.execute(
            "select count(ql.run_event(q.id, 'queued', 'run.queued', 'system', null, null, '{}', ql.now_ms(),"
            " 'run.queued:' || q.id::text)) from new_runs q"
        ).fetchone()
    assert row is not None and row[0] == count, row


# -- pg_stat_statements: per call type -------------------------------------------------------------


@dataclass(frozen=True)
class Statement:
    """One normalised statement's counters over a window (pg_stat_statements, top-level calls)."""

    query: str
    calls: int
    mean_ms: float
    rows: int
    wal_bytes: int
    wal_records: int
    wal_fpi: int
    blocks: int  # shared buffers hit + read

    @property
    def label(self) -> str:
        """`ql_api.attempt_lease_control_v1`, else the statement's first words."""
        for word in self.query.replace("(", " ").split():
            if "." in word and word.split(".")[0] in ("ql_api", "ql", "procrastinate"):
                return word
            if word.startswith("procrastinate_"):
                return word
        return " ".join(self.query.split())[:60]


def statements_reset(env: Env) -> None:
    with psycopg.connect(env.dsn("postgres"), autocommit=True) as conn:
        conn.execute("select pg_stat_statements_reset()")


def statements(env: Env, database: str, toplevel: bool = True) -> list[Statement]:
    """The statements run in `database` since the last reset, most calls first (BEGIN/COMMIT left out)."""
    with psycopg.connect(env.dsn("postgres"), autocommit=True) as conn:
        rows = conn.execute(
            "select s.query, s.calls, s.mean_exec_time, s.rows, s.wal_bytes, s.wal_records, s.wal_fpi,"
            " s.shared_blks_hit + s.shared_blks_read"
            " from pg_stat_statements s join pg_database d on d.oid = s.dbid"
            " where d.datname = %s and s.toplevel = %s and s.calls > 0"
            " and upper(split_part(ltrim(s.query), ' ', 1)) not in ('BEGIN', 'COMMIT', 'END', 'ROLLBACK')"
            " order by s.calls desc, s.query",
            (database, toplevel),
        ).fetchall()
    return [
        Statement(str(q), int(c), float(m), int(r), int(w), int(wr), int(f), int(b)) for q, c, m, r, w, wr, f, b in rows
    ]


def statements_table(found: Sequence[Statement], per: int | None = None) -> str:
    """calls, mean execution time, rows, WAL bytes/records/full-page images per call, buffers per call;
    with `per` (the transactions or jobs of the window) also calls and WAL bytes per such unit, and without the
    statements run less than once per 100 units."""
    headers = ["call", "calls", "mean ms", "rows/call", "WAL B/call", "WAL records/call", "FPI/call", "buffers/call"]
    if per:
        headers += ["calls/unit", "WAL B/unit"]
    rows = []
    for s in found:
        if per and s.calls < per / 100:  # set-up and probes, not the measured work
            continue
        row = [f"`{s.label}`", fmt(s.calls), fmt(s.mean_ms, 3), fmt(s.rows / s.calls, 2), fmt(s.wal_bytes / s.calls),
               fmt(s.wal_records / s.calls, 1), fmt(s.wal_fpi / s.calls, 2), fmt(s.blocks / s.calls, 1)]  # fmt: skip
        if per:
            row += [fmt(s.calls / per, 2), fmt(s.wal_bytes / per)]
        rows.append(row)
    return table(headers, rows)


def record_json(key: str, counts: dict[str, Any], path: Path = REPO / "bench" / "results.json") -> None:
    """Read-modify-write bench/results.json (one JSON object; every other benchmark keeps its key)."""
    data: dict[str, Any] = {}
    with contextlib.suppress(FileNotFoundError, ValueError):
        loaded = json.loads(path.read_text())
        if isinstance(loaded, dict):
            data = loaded
    data[key] = counts
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
