"""(h) The performance figures and their targets, in one run: a renewal soak (8 connections renewing 8 Attempts
of ONE Worker at once; MultiXacts created per renewal, from pg_control_checkpoint()'s next MultiXact id
after a CHECKPOINT before and after), the retry scan of ql_api.lease_expiry_reconcile_v1 with 100,000 Runs
waiting for a retry and none due (shared buffers hit + read of its statements in one call, from
pg_stat_statements with track = all), where one lifecycle's execution time goes (its inner statements), then
the figures combined with (a) and (b) of the same run:
written to bench/results.json as `perf` (a figure this run did not measure keeps its earlier value) and
as a table of figure, target and what bounds it.

Touches: databases `soak`, `retry_scan` and `anatomy` (cloned from the template), bench/results.json, the
cluster's statistics (pg_stat_statements reset) and two CHECKPOINTs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import time
from typing import Any

import psycopg

from bench import lifecycle_cost, lifecycles
from bench.cluster import enroll, make_task, queue_runs
from bench.lease_renewals import LEASE_CONTROL, Held, running
from bench.report import Result, fmt, record_json, table
from bench.statements import statements, statements_reset
from tests.support.env import REPO, Env
from tests.support.progress import say

SOAK_CONNECTIONS = 8
WAITING = 100_000
LIMIT = 128  # the page of lease_expiry_reconcile_v1 (ql_api.converge's default)

# figure → (target, higher is better, what it measures)
TARGETS: dict[str, tuple[float, bool, str]] = {
    "renew_direct_over_pgbench8": (
        0.65, True, "direct-SQL renewals/s at 8 connections over pgbench simple-update tps at 8 clients, "
        "pgbench the client of both"),
    "lifecycle_pgcpu_over_procrastinate": (
        2.5, False, "PostgreSQL CPU of a lifecycle (4 calls, SQL) over a Procrastinate job's fetch + finish"),
    "tx_pgcpu_over_procrastinate": (1.0, False, "the same per transaction (4 against 2)"),
    "wal_per_lifecycle_over_procrastinate": (
        2.5, False, "WAL bytes of a lifecycle (4 calls, SQL) over a Procrastinate job's fetch + finish"),
    "shell_cpu_us_per_lifecycle": (1500.0, False, "shell CPU µs per lifecycle (4 HTTPS calls), 8 Workers"),
    "shell_cpu_us_per_renewal": (300.0, False, "shell CPU µs per renewal, 128 Workers through the shell"),
    "wal_per_renewal_over_pgbench": (
        1.0, False, "WAL bytes per renewal over WAL bytes per pgbench transaction (pg_stat_statements)"),
    "multixacts_per_renewal": (
        0.0, False, f"MultiXacts created per renewal, {SOAK_CONNECTIONS} connections renewing Attempts of one Worker"),
    "retry_scan_buffers_100k_waiting": (
        math.nan, False, f"shared buffers of the retry scan, {WAITING:,} Runs waiting and none due"),
}  # fmt: skip


def _multixact(conn: psycopg.Connection[Any]) -> int:
    conn.execute("checkpoint")
    row = conn.execute("select next_multixact_id::text::bigint from pg_control_checkpoint()").fetchone()
    assert row is not None
    return int(row[0])


async def soak(env: Env, seconds: float) -> dict[str, Any]:
    """One Worker (a session of capacity 8) holding 8 running Attempts; 8 connections renew them in a loop."""
    env.create_database("soak")
    with psycopg.connect(env.dsn("soak"), autocommit=True) as conn:
        (who,) = enroll(env, conn, 1, "soak", "soak")
        queue_runs(
            conn, make_task(conn, "bench", "soak-task", {"argv": ["sleep", "3600"], "pool": "soak"}), SOAK_CONNECTIONS
        )
    env.vacuum_analyze("soak")
    with psycopg.connect(env.dsn("soak", "ql_runtime"), autocommit=True) as rt:
        row = rt.execute(
            "select ql_api.worker_session_open_v1(%s, 1, %s, %s)", (who.worker_id, who.fingerprint, SOAK_CONNECTIONS)
        ).fetchone()
        assert row is not None and row[0]["status"] == "opened", row
        session = str(row[0]["sessionId"])
        held = [running(rt, who, session, b"") for _ in range(SOAK_CONNECTIONS)]
    conns = [await psycopg.AsyncConnection.connect(env.dsn("soak", "ql_runtime"), autocommit=True) for _ in held]
    renewals = errors = 0
    try:
        with psycopg.connect(env.dsn("postgres"), autocommit=True) as su:
            before = _multixact(su)
            end = time.perf_counter() + seconds

            async def loop(h: Held, conn: psycopg.AsyncConnection[Any]) -> None:
                nonlocal renewals, errors
                while time.perf_counter() < end:
                    cur = await conn.execute(LEASE_CONTROL, (*h.fence(), h.version))
                    row = await cur.fetchone()
                    answer = row[0] if row else {}
                    if answer.get("status") != "renewed":
                        errors += 1
                        return
                    h.version = int(answer["leaseVersion"])
                    renewals += 1

            await asyncio.gather(*(loop(h, c) for h, c in zip(held, conns, strict=True)))
            after = _multixact(su)
    finally:
        for c in conns:
            await c.close()
    created = after - before
    say(f"(h) soak: {renewals:,} renewals of one Worker's {len(held)} Attempts, {created:,} MultiXacts created")
    return {"renewals": renewals, "errors": errors, "multixacts": created,
            "multixacts_per_renewal": created / renewals if renewals else None}  # fmt: skip


def retry_scan(env: Env) -> dict[str, Any]:
    """WAITING retry_wait Runs (due in an hour), then one call of lease_expiry_reconcile_v1 as ql_scheduler
    measured by pg_stat_statements with track = all (after a first call that warms the session's plans)."""
    env.create_database("retry_scan")
    with psycopg.connect(env.dsn("retry_scan"), autocommit=True) as conn:
        task = make_task(conn, "bench", "retry-task", {"argv": ["true"], "pool": "retry"})
        conn.execute(
            "insert into ql.runs (project_id, task_id, task_revision_id, pool, status, attempt_count, retry_at_ms,"
            " queued_at_ms, created_at_ms)"
            " select t.project_id, t.task_id, t.id, %s, 'retry_wait', 1, ql.now_ms() + 3600000 + g, ql.now_ms(),"
            " ql.now_ms() from ql.task_execution_revisions t cross join generate_series(1, %s) g where t.id = %s",
            (task.pool, WAITING, task.revision_id),
        )
    env.vacuum_analyze("retry_scan")
    with psycopg.connect(env.dsn("retry_scan"), autocommit=True) as conn:
        conn.execute("set pg_stat_statements.track = 'all'")
        conn.execute("set role ql_scheduler")
        call = "select ql_api.lease_expiry_reconcile_v1(%s, 0)"
        conn.execute(call, (LIMIT,))
        statements_reset(env)
        started = time.perf_counter()
        row = conn.execute(call, (LIMIT,)).fetchone()
        ms = (time.perf_counter() - started) * 1000
    assert row is not None and row[0]["status"] == "ok" and row[0]["scanned"] == 0, row
    inner = statements(env, "retry_scan", toplevel=False)
    top = [s for s in statements(env, "retry_scan") if "lease_expiry_reconcile_v1" in s.query]
    scans = [s for s in inner if "retry_at_ms" in s.query and s.query.lstrip().lower().startswith(("select", "with"))]
    scan_blocks = sum(s.blocks for s in scans)
    say(f"(h) retry scan, {WAITING:,} Runs waiting, none due: {scan_blocks:,} buffers ({ms:.1f} ms the call)")
    return {
        "waiting": WAITING,
        "scan_buffers": scan_blocks if scans else None,
        "call_buffers": sum(s.blocks for s in top),
        "call_ms": ms,
        "statements": [(" ".join(s.query.split())[:140], s.blocks) for s in inner],
    }


def figures(a: dict[str, Any], b: dict[str, Any], h: dict[str, Any]) -> dict[str, float | None]:
    """The `perf` figures of what ran (a, b and h may each be empty)."""
    out: dict[str, float | None] = {}
    if a:
        out["renew_direct_over_pgbench8"] = a["direct_pgbench8"] / a["pgbench8"] if a["pgbench8"] else None
        cpu, rate = a["shell_cpu"][128], a["shell"][128]
        out["shell_cpu_us_per_renewal"] = cpu["shell"] / rate * 1e6 if cpu and rate else None
        wal = a["wal_per_renewal"] / a["wal_per_pgbench_tx"]
        out["wal_per_renewal_over_pgbench"] = None if math.isnan(wal) else wal
    if b and b["lifecycle_pg_us"] and b["job_pg_us"]:
        out["lifecycle_pgcpu_over_procrastinate"] = b["lifecycle_pg_us"] / b["job_pg_us"]
        per_tx = b["lifecycle_pg_us"] / lifecycles.CALLS_PER_LIFECYCLE
        out["tx_pgcpu_over_procrastinate"] = per_tx / (b["job_pg_us"] / 2)
    if b:
        wal = b["wal_per_lifecycle"] / b["wal_per_job"] if b["wal_per_job"] else math.nan
        out["wal_per_lifecycle_over_procrastinate"] = None if math.isnan(wal) else wal
        out["shell_cpu_us_per_lifecycle"] = b["shell_us"]
    if h:
        out["multixacts_per_renewal"] = h["soak"]["multixacts_per_renewal"]
        out["retry_scan_buffers_100k_waiting"] = h["retry"]["scan_buffers"]
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in out.items()}


def record(found: dict[str, float | None]) -> dict[str, Any]:
    """Merge this run's figures into bench/results.json `perf` (the others keep their earlier values)."""
    path = REPO / "bench" / "results.json"
    perf: dict[str, Any] = {}
    with contextlib.suppress(FileNotFoundError, ValueError, AttributeError):
        perf = dict(json.loads(path.read_text()).get("perf") or {})
    perf.update(found)
    record_json("perf", perf)
    return perf


def bounds(a: dict[str, Any], b: dict[str, Any], h: dict[str, Any]) -> list[str]:
    """What bounds each figure, in this run's numbers."""
    out: list[str] = []
    if a:
        d8, pg8 = a["direct_pgbench8_cpu"] or {}, a["pgbench8_cpu"] or {}
        renew_pg = d8.get("postgres", math.nan) / a["direct_pgbench8"] * 1e6
        tx_pg = pg8.get("postgres", math.nan) / a["pgbench8"] * 1e6
        out.append(
            f"Renewals at 8 connections: PostgreSQL CPU {fmt(renew_pg)} µs a renewal against {fmt(tx_pg)} µs a pgbench "
            f"transaction ({renew_pg / tx_pg:.2f}x); execution time in PostgreSQL {a['renew_exec_ms']:.3f} ms against "
            f"{a['pgbench_tx_exec_ms']:.3f} ms; WAL {fmt(a['wal_per_renewal'])} B against "
            f"{fmt(a['wal_per_pgbench_tx'])} B (the per-call tables of (a)). With commits grouped by fsync the "
            "renewal rate follows PostgreSQL's CPU per renewal."
        )
        cpu, rate = a["shell_cpu"][128] or {}, a["shell"][128]
        if cpu and rate:
            busy, rest = cpu.get("machine", math.nan) * (os.cpu_count() or 1), cpu.get("rest", 0.0)
            limit = (
                "the shell ran near a full core: its own CPU per request bounds its rate"
                if cpu["shell"] >= 0.75
                else f"the machine was {busy:.2f} of {os.cpu_count()} cores busy (other work {rest:.2f})"
            )
            out.append(
                f"Through the shell, 128 Workers: the shell used {cpu['shell']:.2f} cores "
                f"({cpu['shell'] / rate * 1e6:,.0f} µs a renewal), PostgreSQL {cpu['postgres']:.2f} "
                f"({cpu['postgres'] / rate * 1e6:,.0f} µs a renewal), the load generator {cpu['self']:.2f}; {limit}. "
                "Where the shell's CPU goes (py-spy): bench/README.md, *Shell CPU per renewal*: about half is aiohttp "
                "and TLS, the floor of one HTTPS answer per request."
            )
    if b and b.get("exec_ms_per_lifecycle"):
        calls = sorted(b["exec_ms_per_lifecycle"].items(), key=lambda kv: -kv[1])
        total = sum(v for _, v in calls)
        out.append(
            f"A lifecycle spent {total:.2f} ms executing in PostgreSQL against {b['exec_ms_per_job']:.2f} ms a "
            "Procrastinate job: "
            + ", ".join(f"`{k}` {v:.2f} ms" for k, v in calls[:4])
            + f"; WAL {fmt(b['wal_per_lifecycle'])} B a lifecycle against {fmt(b['wal_per_job'])} B a job. Where it "
            "goes, statement by statement, and what each transaction pays: *Where a lifecycle's time in PostgreSQL "
            "goes* above."
        )
    if h and h["retry"]["scan_buffers"] is not None:
        n, waiting = h["retry"]["scan_buffers"], h["retry"]["waiting"]
        out.append(
            f"Retry scan: {fmt(n)} shared buffers with {fmt(waiting)} Runs waiting and none due, "
            f"{n / waiting * 1000:.1f} per 1,000 waiting Runs"
            + (": it reads the waiting Runs, not a range of the due ones." if n > 100 else ": bounded.")
        )
    if h:
        out.append(
            f"MultiXacts: {fmt(h['soak']['multixacts'])} created by {fmt(h['soak']['renewals'])} concurrent renewals "
            "of one Worker's Attempts (shared row locks taken by several transactions on the Worker's rows)."
        )
    return out


def anatomy(env: Env) -> dict[str, Any]:
    """Where one lifecycle's execution time in PostgreSQL goes (bench/lifecycle_cost.py on its own database)."""
    env.create_database("anatomy")
    with psycopg.connect(env.dsn("anatomy"), autocommit=True) as conn:
        conn.execute("create extension pg_stat_statements")  # its view, in this database too
    found = lifecycle_cost.lifecycle(env.dsn("anatomy"))
    say(f"(h) lifecycle anatomy: {found['inner_statements']:.0f} inner statements, {fmt(found['wal_bytes'])} B of WAL")
    return found


def anatomy_lines(found: dict[str, Any], top: int = 12) -> str:
    """The inner statements that took the most time, per lifecycle."""
    total = sum(us for query, _, us in found["inner"] if not _container(query))
    rows = [
        [f"`{query[:90]}`", f"{calls:.2f}", fmt(us), "call: includes its body" if _container(query) else ""]
        for query, calls, us in found["inner"][:top]
    ]
    locks = ", ".join(
        f"`{call}` {n} ({shared} through the shared lock table)" for call, n, shared in found["relation_locks"]
    )
    fence_us = sum(us for query, _, us in found["inner"] if "ql.attempt_fence(" in query) / 3  # three fenced calls
    return (
        f"**Where a lifecycle's time in PostgreSQL goes.** {lifecycle_cost.LIFECYCLES} lifecycles over SQL on one "
        f"connection (after a history of {lifecycle_cost.HISTORY:,} lifecycles, VACUUM ANALYZE and "
        f"{lifecycle_cost.LIFECYCLES} unmeasured), `pg_stat_statements.track = all`: per lifecycle "
        f"{found['inner_statements']:.0f} inner statements in {found['calls']:.0f} calls"
        f" ({len(found['replanned'])} planned anew on every call{': ' if found['replanned'] else ''}"
        f"{'; '.join(f'`{q}`' for q in found['replanned'])}), {fmt(found['wal_bytes'])} B "
        f"of WAL in {found['wal_records']:.0f} records, {found['rows_written']:.0f} rows written; the statements "
        f"that are not calls of a function executed {fmt(total)} µs. The {top} that took longest, µs per lifecycle:\n\n"
        + table(["statement", "runs per lifecycle", "µs per lifecycle", ""], rows)
        + "\n\nWhat a call pays is mostly per transaction: `ql.attempt_fence` took "
        f"{fence_us:.0f} µs a fenced call here and {found['fence_loop_us']:.0f} µs a call in a loop inside one "
        "transaction (its locks, snapshot and plans already there). Each transaction takes a snapshot and locks every "
        f"table and index it touches (a non-HOT update of a Run writes all {found['run_indexes']} indexes of "
        f"`ql.runs`; an event insert checks each of the {found['event_partitions']} month partitions of "
        "`ql.run_events` for a duplicate). Tables and indexes a call locks, before it "
        f"commits, in order: {locks}."
    )


def _container(query: str) -> bool:
    """A statement that calls a ql function (its time includes the statements of that function)."""
    return query.lower().startswith(("select ql.", "select * from ql.", "select * into"))


async def run(env: Env, seconds: float, a: dict[str, Any], b: dict[str, Any]) -> Result:
    say(f"(h) renewal soak: {SOAK_CONNECTIONS} connections, one Worker, {seconds:.0f} s")
    h = {"soak": await soak(env, seconds), "retry": retry_scan(env), "anatomy": anatomy(env)}
    found = figures(a, b, h)
    perf = record(found)
    rows = []
    for key, (target, higher, what) in TARGETS.items():
        value = perf.get(key)
        if value is None or math.isnan(target):
            met = "—"
        else:
            met = "yes" if (value >= target if higher else value <= target) else "**no**"
        shown = "—" if value is None else (fmt(value) if isinstance(value, int) else fmt(float(value), 2))
        goal = "bounded" if math.isnan(target) else ("≥ " if higher else "≤ ") + fmt(target, 2)
        rows.append([f"`{key}`", shown + ("" if key in found else " (earlier run)"), goal, met, what])
    soak_ = h["soak"]
    retry = h["retry"]
    scan_lines = "\n".join(f"- `{label}`: {fmt(blocks)} buffers" for label, blocks in retry["statements"])
    markdown = (
        "## (h) Performance figures\n\n"
        "Combined from (a), (b) and this part, all in this run; also in bench/results.json under `perf` (a figure "
        "this run did not measure keeps its earlier value, marked). Where a target is not met, the sections (a) and "
        "(b) show what bounds it: the CPU split per call (load generator, shell, PostgreSQL), the per-call-type "
        "tables (mean execution time, WAL) and the WAL fsync columns.\n\n"
        + table(["figure", "measured", "target", "met", "what"], rows)
        + f"\n\n**Renewal soak.** {SOAK_CONNECTIONS} psycopg connections as ql_runtime, each renewing one of "
        f"{SOAK_CONNECTIONS} running Attempts of ONE Worker (one session of capacity {SOAK_CONNECTIONS}) for "
        f"{seconds:.0f} s: {fmt(soak_['renewals'])} renewals, {soak_['errors']} errors, "
        f"{fmt(soak_['multixacts'])} MultiXacts created (next MultiXact id of `pg_control_checkpoint()` after a "
        "CHECKPOINT before and after; nothing else ran on the cluster).\n\n"
        f"**Retry scan.** {retry['waiting']:,} Runs in retry_wait, the earliest due in an hour, `VACUUM ANALYZE`d; "
        f"`ql_api.lease_expiry_reconcile_v1({LIMIT}, 0)` called twice as ql_scheduler, the second measured with "
        f"`pg_stat_statements.track = all`: {retry['call_ms']:.1f} ms, {fmt(retry['call_buffers'])} shared buffers "
        "(hit + read) for the whole call; its statements:\n\n"
        f"{scan_lines}\n\nThe figure counts the statements that select on `retry_at_ms`.\n\n"
        + anatomy_lines(h["anatomy"])
        + "\n\n"
        "What bounds the figures, measured in this run:\n\n" + "".join(f"- {line}\n" for line in bounds(a, b, h))
    )
    summary = ["(h) " + ", ".join(f"{k} {v}" for k, v in found.items())]
    return Result(markdown, summary, h)
