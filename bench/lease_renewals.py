"""(a) Lease renewals per second and p50/p99 latency: through the shell over TLS 1.3 mTLS with 1, 16
and 128 simulated Workers (each its own enrolled Worker, certificate, session and keep-alive socket,
every request ql3w-signed), beside ql_api.attempt_lease_control_v2 called directly by as many
psycopg connections as ql_runtime (and by 8, the figure compared with pgbench at 8 clients), beside
pgbench's builtin `simple-update` on the same cluster (8 clients: the machine's commit limit; 1 client:
one commit at a time). The shell is restarted after seeding and ANALYZE, and every direct phase opens its
connections then, so no measured connection keeps plans made against empty tables; the direct phase at 8
and pgbench at 8 are also read from pg_stat_statements (calls, mean time, rows, WAL per call type).
Then the same 128 Workers against a shell of PROCESSES processes (shell.toml `processes`,
SO_REUSEPORT): renewals/s with 1 and with PROCESSES processes and their ratio, also in
bench/results.json under "shell_processes".

Touches: the `qinglong` database (Workers, Runs, Attempts of pool `lease`), a `pgbench` database,
the shell it is given and the ones it starts (separate processes), loopback sockets, bench/results.json.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import re
import secrets
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import psycopg

from bench.cluster import enroll, make_task, queue_runs
from bench.meters import (
    CONTENDED_NOTE,
    WARMUP_S,
    CpuMeter,
    Phase,
    Window,
    contended,
    cpu_cell,
    cpu_meter,
    per_call,
    wal_cell,
)
from bench.report import Result, fmt, ratio, record_json, table
from bench.statements import Statement, statements, statements_reset, statements_table
from qinglong.devdb import server_bindir
from qinglong.wire import LeaseControlRequest, ql3w
from qinglong.wire.common import token_digest
from tests.support.env import Env, Identity, ShellProcess, stop_process
from tests.support.progress import say

COUNTS = (1, 16, 128)
DIRECT_COUNTS = (1, 8, 16, 128)  # 8: compared with pgbench at 8 clients (bench/results.json `perf`)
PGBENCH_TX = "UPDATE pgbench_accounts"  # one per simple-update transaction
WIDE_POOL = 16
PROCESSES = 2  # the shell of several processes: its children, each with the default pool
SATURATED = 0.75  # cores: a Python process near one full core is the bound
LEASE_CONTROL = "select ql_api.attempt_lease_control_v2(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, false)"


@dataclass
class Held:
    """A running Attempt one simulated Worker holds, and the Lease version it last saw."""

    who: Identity
    session_id: str
    session_key: bytes
    offer: dict[str, Any]
    token: str
    version: int

    @property
    def digest(self) -> bytes:
        return token_digest(self.token)

    def fence(self) -> tuple[Any, ...]:
        o = self.offer
        return (
            self.who.worker_id,
            self.session_id,
            1,
            o["projectId"],
            o["runId"],
            o["attemptId"],
            o["offerId"],
            o["leaseGeneration"],
            self.digest,
        )


# -- the simulated Worker over HTTPS --------------------------------------------------------------


class SimWorker:
    """One simulated Worker: its own certificate, one keep-alive TLS 1.3 socket (limit=1), ql3w."""

    def __init__(self, env: Env, who: Identity, origin: str) -> None:
        self.who = who
        self.origin = origin
        connector = aiohttp.TCPConnector(ssl=env.client_context(who), limit=1, keepalive_timeout=600)
        self.http = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30))
        self.session_id = ""
        self.key = b""

    async def open_session(self) -> None:
        body = json.dumps({"schema": "qinglong/worker-session@v1", "capacity": 1, "workerGeneration": 1}).encode()
        path = f"/api/v3/workers/{self.who.worker_id}/sessions"
        async with self.http.post(self.origin + path, data=body, headers={"Content-Type": "application/json"}) as resp:
            opened = await resp.json()
            assert resp.status == 200, opened
        self.session_id = opened["sessionId"]
        self.key = base64.urlsafe_b64decode(opened["sessionKey"] + "=")

    async def post(self, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        auth = ql3w.authorization(
            self.key, worker_id=self.who.worker_id, session_id=self.session_id, generation=1,
            method="POST", path=path, body=body, now=int(time.time()),
        )  # fmt: skip
        headers = {"Authorization": auth, "Content-Type": "application/json"}
        async with self.http.post(self.origin + path, data=body, headers=headers) as resp:
            return resp.status, await resp.json()

    async def close(self) -> None:
        await self.http.close()


async def shell_phase(held: list[Held], workers: list[SimWorker], seconds: float, meter: CpuMeter) -> Phase:
    phase = Phase("shell", len(workers), seconds)
    window = Window(seconds)
    cpu = asyncio.ensure_future(window.meter(meter))

    async def loop(h: Held, w: SimWorker) -> None:
        path = f"/api/v3/workers/{h.who.worker_id}/sessions/{h.session_id}/lease-control"
        o = h.offer
        obj = LeaseControlRequest(
            worker_generation=1, project_id=o["projectId"], run_id=o["runId"], attempt_id=o["attemptId"],
            lease_generation=o["leaseGeneration"], lease_token=h.token, offer_id=o["offerId"],
            expected_version=h.version,
        ).to_obj()  # fmt: skip
        while time.perf_counter() < window.end:
            obj["expectedVersion"] = h.version
            body = json.dumps(obj, separators=(",", ":")).encode()
            started = time.perf_counter()
            status, answer = await w.post(path, body)
            ended = time.perf_counter()
            if status != 200 or answer.get("status") != "renewed" or answer["leaseVersion"] != h.version + 1:
                phase.errors += 1
                return
            h.version = answer["leaseVersion"]
            window.record(phase, started, ended)

    await asyncio.gather(*(loop(h, w) for h, w in zip(held, workers, strict=True)))
    phase.cpu = await cpu
    return phase


async def direct_phase(env: Env, held: list[Held], seconds: float, meter: CpuMeter) -> Phase:
    phase = Phase("direct", len(held), seconds)
    conns = await asyncio.gather(
        *(psycopg.AsyncConnection.connect(env.dsn("qinglong", "ql_runtime"), autocommit=True) for _ in held)
    )
    window = Window(seconds)
    cpu = asyncio.ensure_future(window.meter(meter))

    async def loop(h: Held, conn: psycopg.AsyncConnection[Any]) -> None:
        fence = h.fence()
        while time.perf_counter() < window.end:
            started = time.perf_counter()
            cur = await conn.execute(LEASE_CONTROL, (*fence, h.version))
            row = await cur.fetchone()
            ended = time.perf_counter()
            answer = row[0] if row else {}
            if answer.get("status") != "renewed" or answer["leaseVersion"] != h.version + 1:
                phase.errors += 1
                return
            h.version = answer["leaseVersion"]
            window.record(phase, started, ended)

    try:
        await asyncio.gather(*(loop(h, c) for h, c in zip(held, conns, strict=True)))
        phase.cpu = await cpu
    finally:
        for c in conns:
            await c.close()
    return phase


# -- pgbench --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pgbench:
    clients: int
    tps: float
    latency_ms: float
    cpu: dict[str, float]


def pgbench(
    env: Env, clients: int, threads: int, seconds: float, script: Path | None = None, database: str = "pgbench"
) -> Pgbench:
    """pgbench's builtin simple-update (or `script`, with the variable v = 0 to start); CPU is metered from its 2nd
    second to 1 s before its end, while all its connections live."""
    base = [str(server_bindir() / "pgbench"), "-h", env.cluster.host, "-p", str(env.cluster.port), "-U", "postgres"]
    duration = max(3, round(seconds))
    what = ["-b", "simple-update"] if script is None else ["-n", "-f", str(script), "-D", "v=0"]
    proc = subprocess.Popen(
        [*base, *what, "-c", str(clients), "-j", str(threads), "-T", str(duration), "-M", "prepared", database],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        meter = cpu_meter(env, proc.pid)
        time.sleep(1.0)
        meter.start()
        time.sleep(duration - 2.0)
        cpu = meter.stop_as("pgbench")
        out, err = proc.communicate(timeout=duration + 60)
    finally:
        stop_process(proc)
    tps = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", out)
    lat = re.search(r"latency average = ([0-9.]+) ms", out)
    if proc.returncode != 0 or tps is None or lat is None:
        raise RuntimeError(f"pgbench failed or printed no result:\n{out}\n{err}")
    cpu.pop("self", None)
    return Pgbench(clients, float(tps[1]), float(lat[1]), cpu)


# Each pgbench client renews one held Attempt: its fence read once (v = 0), then the renewal with the version the
# last one answered. As the superuser, as pgbench's own simple-update runs (the function runs as its owner).
RENEW_SCRIPT = """\\if :v = 0
select w, s, g, p, r, a, o, lg, d, v from bench_renewals.fences where client = :client_id \\gset
\\endif
select ql_api.attempt_lease_control_v2(:w, :s, :g, :p, :r, :a, :o, :lg, :d, :v, false) ->> 'leaseVersion' as v \\gset
"""


def renewals_by_pgbench(env: Env, held: list[Held], seconds: float, folder: Path) -> Pgbench:
    """The direct renewals with pgbench's C client (RENEW_SCRIPT), one held Attempt per client: the same client as
    the simple-update they are compared with. The held versions are read back after it (every Attempt renewed)."""
    attempts = [h.offer["attemptId"] for h in held]
    with psycopg.connect(env.dsn("qinglong"), autocommit=True) as conn:
        conn.execute("create schema bench_renewals")
        conn.execute(
            "create table bench_renewals.fences (client int primary key, w uuid, s uuid, g bigint, p uuid, r uuid,"
            " a uuid, o uuid, lg bigint, d bytea, v bigint)"
        )
        for client, h in enumerate(held):
            conn.execute(
                "insert into bench_renewals.fences values (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (client, *h.fence(), h.version),
            )
        script = folder / "renew.sql"
        script.write_text(RENEW_SCRIPT)
        try:
            result = pgbench(env, len(held), 2, seconds, script=script, database="qinglong")
        finally:
            conn.execute("drop schema bench_renewals cascade")
        versions: dict[str, int] = dict(
            conn.execute(
                "select attempt_id::text, version from ql.run_leases where attempt_id = any(%s::uuid[])", (attempts,)
            ).fetchall()
        )
    for h in held:
        assert versions[h.offer["attemptId"]] > h.version, "an Attempt pgbench did not renew"
        h.version = int(versions[h.offer["attemptId"]])
    return result


def pgbench_init(env: Env) -> None:
    with psycopg.connect(env.dsn("postgres"), autocommit=True) as conn:
        conn.execute("create database pgbench")
    base = [str(server_bindir() / "pgbench"), "-h", env.cluster.host, "-p", str(env.cluster.port), "-U", "postgres"]
    subprocess.run([*base, "-i", "-q", "-s", "1", "pgbench"], capture_output=True, check=True)


# -- seeding --------------------------------------------------------------------------------------


def seed(env: Env, count: int) -> list[Identity]:
    """`count` Workers of pool `lease` and as many queued Runs (no timeout, so no deadline)."""
    with psycopg.connect(env.dsn("qinglong"), autocommit=True) as conn:
        who = enroll(env, conn, count, "lease", "lease")
        task = make_task(conn, "bench", "lease-task", {"argv": ["sleep", "3600"], "pool": "lease"})
        queue_runs(conn, task, count)
    env.vacuum_analyze("qinglong")
    return who


def running(rt: psycopg.Connection[Any], who: Identity, session_id: str, key: bytes) -> Held:
    """One offer pulled for the Worker's session and ACKed starting and running, as ql_runtime through ql_api."""
    token = ql3w.b64url(secrets.token_bytes(32))
    digest = token_digest(token)
    row = rt.execute("select ql_api.offer_pull_v1(%s, %s, 1, %s)", (who.worker_id, session_id, digest)).fetchone()
    assert row is not None and row[0]["status"] == "offered", row
    held = Held(who, session_id, key, row[0]["offer"], token, 1)
    for phase in ("starting", "running"):
        row = rt.execute(
            "select ql_api.attempt_activation_v1(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, null)", (phase, *held.fence())
        ).fetchone()
        assert row is not None and row[0]["status"] == "applied", row
        held.version = int(row[0]["snapshot"]["leaseVersion"])
    return held


def hold(env: Env, workers: list[SimWorker]) -> list[Held]:
    """Each Worker holds one running Attempt (running())."""
    with psycopg.connect(env.dsn("qinglong", "ql_runtime"), autocommit=True) as rt:
        return [running(rt, w.who, w.session_id, w.key) for w in workers]


# -- the benchmark --------------------------------------------------------------------------------


async def run(env: Env, seconds: float) -> Result:
    assert env.shell is not None and env.shell.pid is not None
    shell = env.shell
    say("(a) pgbench -i (scale 1) on its own database")
    pgbench_init(env)
    say(f"(a) pgbench simple-update, 8 clients, {seconds:.0f} s")
    statements_reset(env)
    pg8 = pgbench(env, 8, 2, seconds)
    pg8_calls = statements(env, "pgbench")
    say(f"(a)   {pg8.tps:,.0f} tps, {pg8.latency_ms:.2f} ms average")
    pg1 = pgbench(env, 1, 1, seconds / 2)
    say(f"(a) pgbench simple-update, 1 client: {pg1.tps:,.0f} tps, {pg1.latency_ms:.2f} ms average")

    n = max(COUNTS)
    say(f"(a) enrolling {n} simulated Workers (one certificate each) and queueing {n} Runs")
    identities = seed(env, n)
    shell.restart()  # its pool connects after ANALYZE
    workers = [SimWorker(env, who, shell.origin) for who in identities]
    try:
        await asyncio.gather(*(w.open_session() for w in workers))
        held = hold(env, workers)
        say(f"(a) {len(held)} running Attempts held (sessions opened through the shell, pull/starting/running via SQL)")
        phases: list[Phase] = []
        renew_calls: list[Statement] = []
        for k in DIRECT_COUNTS:
            statements_reset(env)
            p = await direct_phase(env, held[:k], seconds, cpu_meter(env, shell.pid))
            if k == 8:
                renew_calls = statements(env, "qinglong")
            phases.append(p)
            say(f"(a) direct, {k:>3} connections: {p.rate:,.0f}/s p50 {p.ms(50):.2f} ms p99 {p.ms(99):.2f} ms")
        with tempfile.TemporaryDirectory(prefix="renew-") as folder:
            renew8 = renewals_by_pgbench(env, held[:8], seconds, Path(folder))
        say(f"(a) direct,   8 connections, pgbench as the client: {renew8.tps:,.0f}/s")
        for k in COUNTS:
            p = await shell_phase(held[:k], workers[:k], seconds, cpu_meter(env, shell.pid))
            phases.append(p)
            say(f"(a) shell,  {k:>3} Workers:     {p.rate:,.0f}/s p50 {p.ms(50):.2f} ms p99 {p.ms(99):.2f} ms")
        diagnostic = await other_shell(env, held, workers, seconds, "shell-wide")
        several = await other_shell(env, held, workers, seconds, "shell-processes")
    finally:
        await asyncio.gather(*(w.close() for w in workers))
    one = next(p for p in phases if p.name == "shell" and p.clients == max(COUNTS))
    record_json(
        "shell_processes",
        {"workers": one.clients, "processes": PROCESSES, "pool_size_each": shell.pool_size,
         "renewals_per_s_1": one.rate, f"renewals_per_s_{PROCESSES}": several.rate,
         "ratio": several.rate / one.rate if one.rate else None,
         "shell_cores_1": (one.cpu or {}).get("shell"), f"shell_cores_{PROCESSES}": (several.cpu or {}).get("shell"),
         "contended": contended(one.cpu) or contended(several.cpu)},
    )  # fmt: skip
    return report(phases, diagnostic, several, pg8, pg1, renew8, seconds, shell.pool_size, pg8_calls, renew_calls)


async def other_shell(env: Env, held: list[Held], workers: list[SimWorker], seconds: float, name: str) -> Phase:
    """The same 128 Workers against a second shell: `shell-wide`, one process whose pool has 16 connections
    (is the pool of 4 — one commit in flight per connection — what caps the shell?); `shell-processes`, a
    shell of PROCESSES processes with the default pool each (does a second process lift the one-core bound?)."""
    if name == "shell-wide":
        wide = ShellProcess(env, "qinglong", pool_size=WIDE_POOL, name=name)
    else:
        wide = ShellProcess(env, "qinglong", name=name, processes=PROCESSES)
    wide.start()
    others = [SimWorker(env, w.who, wide.origin) for w in workers]
    for mine, theirs in zip(others, workers, strict=True):
        mine.session_id, mine.key = theirs.session_id, theirs.key
    try:
        p = await shell_phase(held, others, seconds, cpu_meter(env, wide.pid))
        p.name = name
        shape = f"a pool of {WIDE_POOL}" if name == "shell-wide" else f"{PROCESSES} processes"
        say(f"(a) shell with {shape}, {len(others)} Workers: {p.rate:,.0f}/s p50 {p.ms(50):.2f} ms")
        return p
    finally:
        await asyncio.gather(*(w.close() for w in others))
        wide.stop()


def wal_per_tx(calls: list[Statement], marker: str) -> tuple[float, int]:
    """WAL bytes per transaction of a window (its statements' WAL over the calls of the statement
    starting with `marker`, one a transaction; commit records are not in pg_stat_statements), and that count."""
    tx = sum(s.calls for s in calls if s.query.lstrip().startswith(marker))
    return (sum(s.wal_bytes for s in calls) / tx if tx else math.nan), tx


def report(
    phases: list[Phase],
    wide: Phase,
    several: Phase,
    pg8: Pgbench,
    pg1: Pgbench,
    renew8: Pgbench,
    seconds: float,
    pool: int,
    pg8_calls: list[Statement],
    renew_calls: list[Statement],
) -> Result:
    direct = {p.clients: p for p in phases if p.name == "direct"}
    shell = {p.clients: p for p in phases if p.name == "shell"}
    rows = [
        ["pgbench simple-update", f"{pg.clients} client{'s' if pg.clients > 1 else ''}", fmt(pg.tps),
         fmt(pg.latency_ms, 2) + " (avg)", "—", "—", "—", wal_cell(pg.cpu, pg.tps),
         per_call(pg.cpu, "postgres", pg.tps), "—", "—", cpu_cell(pg.cpu)]
        for pg in (pg8, pg1)
    ] + [
        ["SQL function, pgbench as the client", f"{renew8.clients} connections", fmt(renew8.tps),
         fmt(renew8.latency_ms, 2) + " (avg)", "—", "—", "—", wal_cell(renew8.cpu, renew8.tps),
         per_call(renew8.cpu, "postgres", renew8.tps), "—", "—", cpu_cell(renew8.cpu)]
    ]  # fmt: skip
    for p in [*phases, wide, several]:
        label = {
            "direct": "SQL function, psycopg",
            "shell": f"shell, HTTPS TLS 1.3 mTLS, pool {pool}",
            "shell-wide": f"diagnostic: shell, pool {WIDE_POOL}",
            "shell-processes": f"shell, `processes = {PROCESSES}`, pool {pool} each",
        }[p.name]
        unit = ("connection" if p.name == "direct" else "Worker") + ("s" if p.clients > 1 else "")
        shell_us = "—" if p.name == "direct" else per_call(p.cpu, "shell", p.rate)
        rows.append(
            [label, f"{p.clients} {unit}", fmt(p.rate), fmt(p.ms(50), 2), fmt(p.ms(99), 2), fmt(p.done),
             str(p.errors), wal_cell(p.cpu, p.rate), per_call(p.cpu, "postgres", p.rate), shell_us,
             per_call(p.cpu, "self", p.rate), cpu_cell(p.cpu)]
        )  # fmt: skip
    pg8_wal, pg8_tx = wal_per_tx(pg8_calls, PGBENCH_TX)
    renew_wal, _ = wal_per_tx(renew_calls, "select ql_api.attempt_lease_control_v2")
    main = table(
        ["path", "clients", "renewals/s (tps)", "p50 ms", "p99 ms", "calls", "errors",
         "WAL fsyncs/s · ms each · commits per fsync", "pg CPU µs/call",
         "shell CPU µs/call", "load generator CPU µs/call", "CPU (cores) · machine busy"],
        rows,
    )  # fmt: skip
    ratio_rows = [["8 (direct only)", ratio(direct[8].rate, pg8.tps), "—", "—", ratio(direct[8].rate, pg1.tps), "—"]]
    for k in COUNTS:
        d, s = direct[k].rate, shell[k].rate
        ratio_rows.append(
            [str(k), ratio(d, pg8.tps), ratio(s, pg8.tps), ratio(s, d), ratio(d, pg1.tps), ratio(s, pg1.tps)]
        )
    top = max(COUNTS)
    ratio_rows.append(
        [f"{wide.clients}, shell pool {WIDE_POOL}", "—", ratio(wide.rate, pg8.tps), ratio(wide.rate, direct[top].rate),
         "—", ratio(wide.rate, pg1.tps)]
    )  # fmt: skip
    ratio_rows.append(
        [f"{several.clients}, shell processes {PROCESSES}", "—", ratio(several.rate, pg8.tps),
         ratio(several.rate, direct[top].rate), "—", ratio(several.rate, pg1.tps)]
    )  # fmt: skip
    ratios = table(
        ["Workers / connections", "direct / pgbench-8", "shell / pgbench-8", "shell / direct", "direct / pgbench-1",
         "shell / pgbench-1"],
        ratio_rows,
    )  # fmt: skip
    warn = (
        CONTENDED_NOTE + "\n\n"
        if any(contended(c) for c in [pg8.cpu, pg1.cpu, *(p.cpu for p in phases), wide.cpu, several.cpu])
        else ""
    )
    markdown = (
        "## (a) Lease renewals\n\n"
        f"Each measured window is {seconds:.0f} s after a {WARMUP_S:.0f} s warm-up; a call counts when it ends inside "
        "the window. *direct*: that many asyncio psycopg connections as `ql_runtime`, each renewing its own "
        "running Attempt in a loop with `select ql_api.attempt_lease_control_v2(…)` (psycopg prepares it after "
        "5 runs). *shell*: `qinglong shell serve` in its own process (worker listener TLS 1.3 with client "
        f"certificates, database pool {pool}), that many simulated Workers in the load generator's one event loop, "
        "each its own enrolled Worker with its own ECDSA P-256 certificate, session and one keep-alive socket "
        "(aiohttp, limit 1), every request signed with ql3w and answered `renewed` with version + 1. "
        "*pgbench*: builtin `simple-update` (`-M prepared`, scale 1) on its own database of the same cluster. "
        "*SQL function, pgbench as the client*: the direct renewals at 8 connections with pgbench's C client instead "
        "of Python's (a script of one `select ql_api.attempt_lease_control_v2(…) ->> 'leaseVersion' \\gset` a "
        "transaction, each client renewing its own Attempt with the version the last renewal answered), so the "
        "renewals and the simple-update they are compared with have the same client: the figure "
        "`renew_direct_over_pgbench8` is this row over pgbench's. The Python client took about half a core for 8 "
        "connections on this 2-core machine, beside PostgreSQL. "
        f"The diagnostic row runs the same {max(COUNTS)} Workers against a second shell process whose pool has "
        f"{WIDE_POOL} connections instead of {pool}. The `processes = {PROCESSES}` row runs them against a shell of "
        f"{PROCESSES} processes (one parent, {PROCESSES} children on the same ports with SO_REUSEPORT, a pool of "
        f"{pool} each; its shell CPU counts the parent and the children). "
        "CPU: cores used over the window by the load generator (gen), the shell and PostgreSQL (pg: every "
        "child of the postmaster, backends and background processes), and by everything else on the machine "
        "(rest: other work — noise; the pgbench rows meter the pgbench client apart), then the machine's busy share of "
        "all cores and the share the hypervisor stole; µs/call divides a group's cores by the calls per "
        "second.\n\n"
        f"{main}\n\n{warn}Ratios (renewals/s over tps, measured in this run):\n\n{ratios}\n\n"
        f"Per call type (pg_stat_statements, top-level statements; mean = execution time in PostgreSQL; WAL per "
        f"call excludes the commit record), pgbench at 8 clients — per unit = per transaction ({fmt(pg8_tx)}):\n\n"
        f"{statements_table(pg8_calls, pg8_tx)}\n\nThe direct renewals at 8 connections:\n\n"
        f"{statements_table(renew_calls)}\n\nWAL per renewal {fmt(renew_wal)} B against {fmt(pg8_wal)} B per pgbench "
        f"transaction: **{ratio(renew_wal, pg8_wal)}**.\n"
        f"{reading(direct, shell, wide)}"
        f"\nSeveral shell processes, {top} Workers: {fmt(shell[top].rate)} renewals/s with 1 process, "
        f"{fmt(several.rate)} with {PROCESSES}: **{ratio(several.rate, shell[top].rate)}** (also in "
        "bench/results.json, `shell_processes`)."
        + (
            " ⚠ Other work took CPU in one of these windows: the processes share what is left, so this ratio"
            " says little; compare it only with an uncontended run.\n"
            if contended(shell[top].cpu) or contended(several.cpu)
            else "\n"
        )
    )
    summary = [
        f"(a) pgbench-8 {pg8.tps:,.0f} tps; "
        + "; ".join(
            f"{k}: direct {direct[k].rate:,.0f}/s ({ratio(direct[k].rate, pg8.tps)}), "
            f"shell {shell[k].rate:,.0f}/s ({ratio(shell[k].rate, pg8.tps)}, shell/direct "
            f"{ratio(shell[k].rate, direct[k].rate)})"
            for k in COUNTS
        )
        + f"; {PROCESSES} shell processes / 1 at {top}: {ratio(several.rate, shell[top].rate)}"
    ]
    data = {
        "pgbench8": pg8.tps,
        "pgbench1": pg1.tps,
        "direct": {k: direct[k].rate for k in DIRECT_COUNTS},
        "direct_pgbench8": renew8.tps,
        "direct_pgbench8_cpu": renew8.cpu,
        "shell": {k: shell[k].rate for k in COUNTS},
        "shell_cpu": {k: shell[k].cpu for k in COUNTS},
        "direct_cpu": {k: direct[k].cpu for k in DIRECT_COUNTS},
        "pgbench8_cpu": pg8.cpu,
        "wal_per_renewal": renew_wal,
        "renew_exec_ms": sum(c.mean_ms * c.calls for c in renew_calls) / max(1, direct[8].done),
        "pgbench_tx_exec_ms": sum(c.mean_ms * c.calls for c in pg8_calls) / pg8_tx if pg8_tx else math.nan,
        "wal_per_pgbench_tx": pg8_wal,
        "contended": {
            "pgbench8": contended(pg8.cpu),
            "direct_pgbench8": contended(renew8.cpu),
            **{f"direct{k}": contended(direct[k].cpu) for k in DIRECT_COUNTS},
            **{f"shell{k}": contended(shell[k].cpu) for k in COUNTS},
        },
    }
    return Result(markdown, summary, data)


def reading(direct: dict[int, Phase], shell: dict[int, Phase], wide: Phase) -> str:
    """Where the time went, in this run's numbers."""
    top = max(COUNTS)
    s, d = shell[top], direct[top]
    if not s.cpu or not d.cpu or not s.rate or not d.rate:
        return ""
    shell_us = s.cpu["shell"] / s.rate * 1e6
    pg_us = s.cpu["postgres"] / s.rate * 1e6
    lines = [
        f"At {top} Workers the shell process used {s.cpu['shell']:.2f} cores, {shell_us:,.0f} µs of CPU per renewal "
        f"(TLS, HTTP, ql3w, wire contracts, its JSON log line, psycopg), against {pg_us:,.0f} µs in PostgreSQL; "
        f"over SQL PostgreSQL alone used {d.cpu['postgres']:.2f} cores for {d.rate:,.0f} renewals/s."
    ]
    if s.cpu["shell"] >= SATURATED and shell_us > pg_us:
        lines.append(
            f"The shell process ran near one full core ({s.cpu['shell']:.2f}) while PostgreSQL had room: through "
            "the shell the bound is the shell's one Python process (one event loop, at most one core), not the "
            f"database; a pool of {WIDE_POOL} instead of 4 gave {ratio(wide.rate, s.rate)} the renewals."
        )
    elif contended(s.cpu):
        lines.append(
            f"Other work on the machine took {s.cpu['rest']:.2f} cores during that window (steal "
            f"{s.cpu.get('steal', 0.0) * 100:.0f} %): the shell's numbers in this run are contended; compare "
            "them with care."
        )
    return "\n" + " ".join(lines) + "\n"
