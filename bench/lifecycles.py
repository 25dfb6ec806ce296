"""(b) Full Run lifecycles per second — pull → starting → one renewal taking the running ACK along →
completion (exit 0, no artifact) — through the shell with the Worker's own HTTPS client, and the same four ql_api calls
made directly over psycopg, beside Procrastinate 3.10 on the same cluster: defer, and a worker that
fetches and finishes no-op jobs. After seeding (queued Runs and a history of 2 s of lifecycles) and ANALYZE
the shell is restarted and Procrastinate's pool reopened, so no measured connection keeps plans made against
empty tables; the SQL lifecycles and Procrastinate's fetch + finish are also read from pg_stat_statements
(calls, mean time, rows, WAL per call type).

Touches: the `qinglong` database (Workers, Runs of pool `lifecycle`), a `procrastinate` database
(Procrastinate's own schema), the shell it is given, loopback sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

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
from bench.report import Result, fmt, ratio, table
from bench.statements import Statement, statements, statements_reset, statements_table
from qinglong.wire import ActivationRequest, CompletionRequest, LeaseControlRequest, LeaseRenewed, OfferOffered, ql3w
from qinglong.wire.common import token_digest
from qinglong.worker.client import FileCredentials, IngressClient, Session
from tests.support.env import Env, Identity
from tests.support.progress import say

WORKERS = 8
HISTORY_S = 2.0  # lifecycles over SQL before ANALYZE
CALLS_PER_LIFECYCLE = 4
PULL = "select ql_api.offer_pull_v1(%s, %s, 1, %s)"
ACTIVATE = "select ql_api.attempt_activation_v1(%s, %s, %s, 1, %s, %s, %s, %s, %s, %s, null)"
RENEW = "select ql_api.attempt_lease_control_v2(%s, %s, 1, %s, %s, %s, %s, %s, %s, %s, true)"
COMPLETE = "select ql_api.attempt_complete_v1(%s, %s, 1, %s, %s, %s, %s, %s, %s, %s, 0, null, '[]'::jsonb)"


async def _loop(phase: Phase, window: Window, once: Callable[[], Awaitable[bool]]) -> None:
    while time.perf_counter() < window.end:
        started = time.perf_counter()
        if not await once():
            phase.errors += 1
            return
        window.record(phase, started, time.perf_counter())


async def through_shell(env: Env, who: list[Identity], seconds: float, meter: CpuMeter) -> Phase:
    """Each simulated Worker is a real IngressClient (its own certificate and socket)."""
    assert env.shell is not None
    clients = [
        IngressClient(env.shell.origin, w.worker_id, FileCredentials(w.certificate, w.key, env.ca())) for w in who
    ]
    phase = Phase("shell", len(who), seconds)
    try:
        sessions = await asyncio.gather(*(c.open_session(capacity=1, generation=1) for c in clients))

        async def lifecycle(client: IngressClient, session: Session) -> bool:
            offered = await client.pull(session, str(uuid.uuid4()))
            if not isinstance(offered, OfferOffered):
                return False
            o = offered.offer
            fence: dict[str, Any] = {
                "worker_generation": 1, "project_id": o.project_id, "run_id": o.run_id, "attempt_id": o.attempt_id,
                "lease_generation": o.lease_generation, "lease_token": offered.lease_token,
            }  # fmt: skip
            ack = await client.activate(session, o.offer_id, "starting", ActivationRequest(**fence))
            body = LeaseControlRequest(
                **fence, offer_id=o.offer_id, expected_version=ack.snapshot.lease_version, running=True
            )
            renewed = await client.lease_control(session, body)
            if not isinstance(renewed, LeaseRenewed):
                return False
            done = await client.complete(
                session,
                o.offer_id,
                CompletionRequest(
                    **fence, lease_version=renewed.lease_version, exit_code=0, error_code=None, artifacts=()
                ),
            )
            return done.run_status == "succeeded"

        window = Window(seconds)
        cpu = asyncio.ensure_future(window.meter(meter))
        await asyncio.gather(
            *(_loop(phase, window, functools.partial(lifecycle, c, s)) for c, s in zip(clients, sessions, strict=True))
        )
        phase.cpu = await cpu
    finally:
        await asyncio.gather(*(c.close() for c in clients))
    return phase


async def direct(env: Env, who: list[Identity], seconds: float, meter: CpuMeter) -> Phase:
    """The same four calls as ql_runtime, one psycopg connection per simulated Worker."""
    phase = Phase("direct", len(who), seconds)
    conns = [await psycopg.AsyncConnection.connect(env.dsn("qinglong", "ql_runtime"), autocommit=True) for _ in who]

    async def one(conn: psycopg.AsyncConnection[Any], query: str, args: tuple[Any, ...]) -> dict[str, Any]:
        cur = await conn.execute(query, args)
        row = await cur.fetchone()
        assert row is not None
        result: dict[str, Any] = row[0]
        return result

    try:
        heads = []
        for w, conn in zip(who, conns, strict=True):
            opened = await one(conn, "select ql_api.worker_session_open_v1(%s, 1, %s, 1)", (w.worker_id, w.fingerprint))
            heads.append((w.worker_id, opened["sessionId"]))

        async def lifecycle(conn: psycopg.AsyncConnection[Any], worker: str, session: str) -> bool:
            token = ql3w.b64url(secrets.token_bytes(32))
            digest = token_digest(token)
            pulled = await one(conn, PULL, (worker, session, digest))
            if pulled["status"] != "offered":
                return False
            o = pulled["offer"]
            fence = (o["projectId"], o["runId"], o["attemptId"], o["offerId"], o["leaseGeneration"], digest)
            ack = await one(conn, ACTIVATE, ("starting", worker, session, *fence))
            renewed = await one(conn, RENEW, (worker, session, *fence, ack["snapshot"]["leaseVersion"]))
            if renewed["status"] != "renewed":
                return False
            done = await one(conn, COMPLETE, (worker, session, *fence, renewed["leaseVersion"]))
            return bool(done["runStatus"] == "succeeded")

        window = Window(seconds)
        cpu = asyncio.ensure_future(window.meter(meter))
        await asyncio.gather(
            *(
                _loop(phase, window, functools.partial(lifecycle, c, w, s))
                for c, (w, s) in zip(conns, heads, strict=True)
            )
        )
        phase.cpu = await cpu
    finally:
        for c in conns:
            await c.close()
    return phase


# -- Procrastinate --------------------------------------------------------------------------------


async def procrastinate_phases(
    env: Env, seconds: float, meter: Callable[[], CpuMeter]
) -> tuple[list[Phase], list[Statement]]:
    """Procrastinate's own schema in its own database: 8 coroutines defer a no-op task for a window,
    then (VACUUM ANALYZE, a fresh pool) its worker fetches and finishes them (concurrency 8, then 1) for a
    window each; also the statements of the concurrency-8 window."""
    import procrastinate

    with psycopg.connect(env.dsn("postgres"), autocommit=True) as conn:
        conn.execute("create database procrastinate")
    dsn = env.dsn("procrastinate")
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn, min_size=4, max_size=4))

    @app.task(name="noop", queue="bench")  # type: ignore[untyped-decorator, unused-ignore]  # untyped when absent
    async def noop() -> None:
        return None

    phases: list[Phase] = []
    calls: list[Statement] = []
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        defer = Phase("defer", WORKERS, seconds)
        window = Window(seconds)
        cpu = asyncio.ensure_future(window.meter(meter()))

        async def deferrer() -> None:
            while time.perf_counter() < window.end:
                started = time.perf_counter()
                await noop.defer_async()
                window.record(defer, started, time.perf_counter())

        await asyncio.gather(*(deferrer() for _ in range(WORKERS)))
        defer.cpu = await cpu
        phases.append(defer)
        say(f"(b) Procrastinate defer, {WORKERS} coroutines: {defer.rate:,.0f} jobs/s")
    env.vacuum_analyze("procrastinate")
    # its pool connects after ANALYZE
    async with app.open_async(), await psycopg.AsyncConnection.connect(dsn, autocommit=True) as probe:

        async def succeeded() -> int:
            cur = await probe.execute("select count(*) from procrastinate_jobs where status = 'succeeded'")
            row = await cur.fetchone()
            return int(row[0]) if row else 0

        for concurrency in (WORKERS, 1):
            worker = asyncio.ensure_future(
                app.run_worker_async(
                    queues=["bench"], concurrency=concurrency, wait=True, install_signal_handlers=False
                )
            )
            await asyncio.sleep(WARMUP_S)
            statements_reset(env)
            m = meter()
            before, t0 = await succeeded(), time.perf_counter()
            m.start()
            await asyncio.sleep(seconds)
            after, t1 = await succeeded(), time.perf_counter()
            used = m.stop()
            if concurrency == WORKERS:
                calls = statements(env, "procrastinate")
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker
            phase = Phase("fetch+finish", concurrency, t1 - t0, count=after - before, cpu=used)
            phases.append(phase)
            say(f"(b) Procrastinate worker, concurrency {concurrency}: {phase.rate:,.0f} jobs/s fetched+finished")
    return phases, calls


# -- the benchmark --------------------------------------------------------------------------------


async def run(env: Env, seconds: float) -> Result:
    assert env.shell is not None
    shell = env.shell
    runs = max(2000, int(seconds * 2000))
    say(f"(b) enrolling {2 * WORKERS} simulated Workers and queueing {runs:,} Runs of pool lifecycle")
    with psycopg.connect(env.dsn("qinglong"), autocommit=True) as conn:
        who = enroll(env, conn, 2 * WORKERS, "lifecycle", "life")
        queue_runs(conn, make_task(conn, "bench", "lifecycle-task", {"argv": ["true"], "pool": "lifecycle"}), runs)
    # A history first, so the statistics ANALYZE gathers know Attempts, Leases, Offers and events as a running
    # system has them (analysed with none, the plans of the fenced calls were ~12 % slower).
    history = await direct(env, who[WORKERS:], HISTORY_S, cpu_meter(env, None))
    say(f"(b) a history of {history.done:,} lifecycles over SQL, then VACUUM ANALYZE")
    env.vacuum_analyze("qinglong")
    shell.restart()  # its pool connects after ANALYZE

    def meter() -> CpuMeter:
        return cpu_meter(env, shell.pid)

    via_shell = await through_shell(env, who[:WORKERS], seconds, meter())
    say(f"(b) lifecycles through the shell, {WORKERS} Workers: {via_shell.rate:,.0f}/s (p50 {via_shell.ms(50):.1f} ms)")
    statements_reset(env)
    via_sql = await direct(env, who[WORKERS:], seconds, meter())
    sql_calls = statements(env, "qinglong")
    say(f"(b) lifecycles over SQL, {WORKERS} connections: {via_sql.rate:,.0f}/s (p50 {via_sql.ms(50):.1f} ms)")
    peers, peer_calls = await procrastinate_phases(env, seconds, meter)
    return report(via_shell, via_sql, peers, seconds, shell.pool_size, sql_calls, peer_calls)


def report(
    via_shell: Phase,
    via_sql: Phase,
    peers: list[Phase],
    seconds: float,
    pool: int,
    sql_calls: list[Statement],
    peer_calls: list[Statement],
) -> Result:
    defer = peers[0]
    fetch8, fetch1 = peers[1], peers[2]
    entries = [
        ("Qinglong", "lifecycle through the shell (4 HTTPS calls)", f"{via_shell.clients} Workers", via_shell,
         CALLS_PER_LIFECYCLE),
        ("Qinglong", "lifecycle over SQL (4 ql_api calls)", f"{via_sql.clients} connections", via_sql,
         CALLS_PER_LIFECYCLE),
        ("Procrastinate 3.10", "defer a no-op job", f"{defer.clients} coroutines, pool 4", defer, 1),
        ("Procrastinate 3.10", "worker: fetch + run + finish", f"concurrency {fetch8.clients}", fetch8, 2),
        ("Procrastinate 3.10", "worker: fetch + run + finish", f"concurrency {fetch1.clients}", fetch1, 2),
    ]  # fmt: skip
    rows = [
        [system, what, concurrency, fmt(p.rate), fmt(p.rate * calls), fmt(p.ms(50), 1), fmt(p.ms(99), 1),
         fmt(p.done), str(p.errors), wal_cell(p.cpu, p.rate * calls), per_call(p.cpu, "postgres", p.rate),
         per_call(p.cpu, "shell", p.rate) if p is via_shell else "—", per_call(p.cpu, "self", p.rate),
         cpu_cell(p.cpu)]
        for system, what, concurrency, p, calls in entries
    ]  # fmt: skip
    main = table(
        ["system", "what", "concurrency", "per second", "transactions/s", "p50 ms", "p99 ms", "count", "errors",
         "WAL fsyncs/s · ms each · transactions per fsync",
         "pg CPU µs each", "shell CPU µs each", "generator CPU µs each", "CPU (cores) · machine busy"],
        rows,
    )  # fmt: skip
    ratios = table(
        ["ratio", "value"],
        [
            ["shell lifecycles / Procrastinate fetch+finish (concurrency 8)", ratio(via_shell.rate, fetch8.rate)],
            ["shell lifecycles / Procrastinate fetch+finish (concurrency 1)", ratio(via_shell.rate, fetch1.rate)],
            ["shell lifecycles / Procrastinate defers", ratio(via_shell.rate, defer.rate)],
            ["SQL lifecycles / Procrastinate fetch+finish (concurrency 8)", ratio(via_sql.rate, fetch8.rate)],
            ["shell lifecycles / SQL lifecycles", ratio(via_shell.rate, via_sql.rate)],
            ["shell calls/s (4 a lifecycle) / Procrastinate worker transactions/s (2 a job, concurrency 8)",
             ratio(via_shell.rate * CALLS_PER_LIFECYCLE, fetch8.rate * 2)],
        ],
    )  # fmt: skip
    sql_units = sum(s.calls for s in sql_calls if "offer_pull_v1" in s.query)
    peer_units = sum(s.calls for s in peer_calls if "procrastinate_fetch_job" in s.query)
    sql_wal = sum(s.wal_bytes for s in sql_calls) / sql_units if sql_units else math.nan
    peer_wal = sum(s.wal_bytes for s in peer_calls) / peer_units if peer_units else math.nan
    warn = CONTENDED_NOTE + "\n\n" if any(contended(p.cpu) for *_, p, _ in entries) else ""
    markdown = (
        "## (b) Run lifecycles beside Procrastinate\n\n"
        f"Windows of {seconds:.0f} s after a {WARMUP_S:.0f} s warm-up. A Qinglong lifecycle is pull → starting ACK → "
        "one lease renewal taking the running ACK along → completion (exit 0, no artifact): four transactions, each a "
        "`ql_api` function. *Through the shell*: 8 simulated Workers, each the Worker's real "
        "`IngressClient` (its own certificate re-read per call, one keep-alive TLS 1.3 socket, ql3w, "
        f"every answer parsed by its wire contract), against `qinglong shell serve` (database pool {pool}). "
        "*Over SQL*: the same four calls from 8 psycopg connections as `ql_runtime`. "
        "*Procrastinate 3.10* (installed from PyPI as the benchmark-only extra `bench`): its own schema in its own "
        "database on the same cluster, `PsycopgConnector` with a pool of 4; 8 coroutines `defer_async()` a no-op "
        "task; then VACUUM ANALYZE (as autovacuum would have done by a steady state; the Qinglong database gets "
        f"the same after seeding its Runs and a history of {HISTORY_S:.0f} s of lifecycles over SQL), then its worker "
        "(`run_worker_async`, LISTEN/NOTIFY on) fetches, "
        "runs and finishes the backlog; jobs/s counts jobs that reached `succeeded` in the window (the generator "
        "column then holds Procrastinate's worker). A Procrastinate job is 3 transactions (defer, "
        "fetch, finish), a Qinglong lifecycle 4 (and the Run's events, Attempt, Lease and Offer rows). CPU columns "
        "as in (a): µs each divides a group's cores by the lifecycles (or jobs) per second.\n\n"
        f"{main}\n\n{warn}Ratios:\n\n{ratios}\n{reading(via_shell, via_sql, fetch8)}\n"
        "Per call type (pg_stat_statements, top-level statements; mean = execution time in PostgreSQL; WAL per call "
        "excludes the commit record), the SQL lifecycles — per unit = per lifecycle "
        f"({fmt(sql_units)}):\n\n{statements_table(sql_calls, sql_units)}\n\n"
        f"Procrastinate's worker at concurrency {fetch8.clients} — per unit = per job ({fmt(peer_units)}; its "
        f"fetch and finish are its worker's statements):\n\n{statements_table(peer_calls, peer_units)}\n\n"
        f"WAL per lifecycle {fmt(sql_wal)} B ({fmt(sql_wal / CALLS_PER_LIFECYCLE)} B a transaction), per "
        f"Procrastinate job {fmt(peer_wal)} B ({fmt(peer_wal / 2)} B a transaction).\n"
    )
    summary = [
        f"(b) lifecycles/s: shell {via_shell.rate:,.0f}, SQL {via_sql.rate:,.0f}; Procrastinate defer "
        f"{defer.rate:,.0f}/s, fetch+finish {fetch8.rate:,.0f}/s (c8), {fetch1.rate:,.0f}/s (c1); "
        f"shell/Procrastinate(c8) {ratio(via_shell.rate, fetch8.rate)}, shell/SQL {ratio(via_shell.rate, via_sql.rate)}"
    ]
    data = {
        "shell": via_shell.rate,
        "sql": via_sql.rate,
        "lifecycle_pg_us": pg_us(via_sql),
        "job_pg_us": pg_us(fetch8),
        "shell_us": via_shell.cpu["shell"] / via_shell.rate * 1e6 if via_shell.cpu and via_shell.rate else None,
        "contended": contended(via_sql.cpu) or contended(fetch8.cpu),
        "wal_per_lifecycle": sql_wal,
        "wal_per_job": peer_wal,
        "exec_ms_per_lifecycle": {c.label: c.mean_ms * c.calls / sql_units for c in sql_calls if sql_units},
        "exec_ms_per_job": sum(c.mean_ms * c.calls for c in peer_calls) / peer_units if peer_units else math.nan,
    }
    return Result(markdown, summary, data)


def pg_us(p: Phase) -> float | None:
    """PostgreSQL CPU µs per operation of a window."""
    return p.cpu["postgres"] / p.rate * 1e6 if p.cpu and p.rate else None


def reading(via_shell: Phase, via_sql: Phase, fetch: Phase) -> str:
    """Where the time went, in this run's numbers."""
    if not (via_shell.cpu and via_sql.cpu and fetch.cpu and via_shell.rate and via_sql.rate and fetch.rate):
        return ""
    sql_pg = via_sql.cpu["postgres"] / via_sql.rate * 1e6
    job_pg = fetch.cpu["postgres"] / fetch.rate * 1e6
    shell_cpu = via_shell.cpu["shell"] / via_shell.rate * 1e6
    return (
        f"\nOver SQL a lifecycle cost PostgreSQL {sql_pg:,.0f} µs of CPU ({sql_pg / CALLS_PER_LIFECYCLE:,.0f} µs a "
        f"call), {ratio(sql_pg, job_pg)} what a Procrastinate job's fetch and finish cost it ({job_pg:,.0f} µs); "
        f"through the shell the shell process added {shell_cpu:,.0f} µs a lifecycle." + "\n"
    )
