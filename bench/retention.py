"""(k) Retention beside live writers, on the bench cluster (fsync on): `--retention-runs` (100,000) terminal Runs
ended last month (each with its Attempt, Lease, offer, six events, an output stream and chunk) wait past a one-day
retention while two writers run whole lifecycles through ql_api as ql_runtime and a reader holds a repeatable-read
report over ql.run_events open 1.5 s in every 3 (what stalled writers before: a report, a pg_dump). `CALL
ql_api.retain()` runs as ql_scheduler, as pg_cron would, until a cycle finishes and the events' old partition has
been dropped. Then the tail trim of one stream under an open snapshot, 8,000 appends; then a cluster of its own
whose clock libfaketime moves ahead with nothing maintaining it (tests/support/clock.py).

Its key in bench/results.json, `retention`: pruned_runs_per_hour (what the five-minute schedule delivers at the
rate measured: 40 s of pruning in every 300), backlog_runs_after, writer_wait_p99_ms_during_maintenance (p99 of the
writers' calls while cycles run; beside it the same p99 before, writer_p99_ms_baseline),
writes_ok_after_maintenance_stopped_days, output_append_ms_growth_with_open_snapshot (mean ms of the last 500
appends minus the first 500 once trimming runs), and the figures they come from.
Touches: database `retention` of the bench cluster (created), its own faked-clock cluster (tests/support/clock.py),
bench/results.json (key `retention`).
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
import threading
import time
from typing import Any, Final

import psycopg

from bench.lifecycle_cost import Fixture, one_lifecycle, scalar, started_attempt
from bench.report import Result, fmt, percentile, record_json, table
from tests.support.clock import converge, faked_clock, lifecycle
from tests.support.env import Env
from tests.support.progress import say

DATABASE: Final = "retention"
SCHEDULE_BUDGET_S: Final = 40  # ql_api.retain's default budget
SCHEDULE_EVERY_S: Final = 300  # ql/retention_schedule: every five minutes
SEED_BATCH: Final = 20_000
WRITERS: Final = 2
BASELINE_S: Final = 10.0
APPENDS: Final = 8_000
APPEND_BYTES: Final = 1024
CLOCK_DAYS: Final = (30, 91, 182, 273, 365, 395, 430, 500)
APPEND = "select ql_api.output_append_v1(%s, %s, 1, %s, %s, %s, %s, %s, %s, 'stdout', %s, %s)"


def _seed_old(admin: psycopg.Connection[Any], revision: str, worker: str, session: str, count: int, at: int) -> None:
    """`count` terminal Runs ended at `at` (ms) with everything a finished Run leaves, set-based, in batches."""
    for start in range(0, count, SEED_BATCH):
        n = min(SEED_BATCH, count - start)
        with admin.transaction():
            admin.execute(
                "with r as (insert into ql.runs (project_id, task_id, task_revision_id, pool, status, version,"
                "    event_sequence, attempt_count, queued_at_ms, created_at_ms, ended_at_ms)"
                "  select t.project_id, t.task_id, t.id, 'old', 'succeeded', 7, 6, 1, %(at)s, %(at)s, %(at)s + 1000"
                "    from ql.task_execution_revisions t cross join generate_series(1, %(n)s) where t.id = %(rev)s"
                "  returning id),"
                " a as (insert into ql.run_attempts (run_id, attempt_no, status, worker_id, worker_generation,"
                "    offer_id, claimed_at_ms, started_at_ms, running_at_ms, ended_at_ms, exit_code, session_id,"
                "    offer_expires_at_ms)"
                "  select r.id, 1, 'succeeded', %(w)s, 1, gen_random_uuid(), %(at)s, %(at)s, %(at)s, %(at)s + 1000, 0,"
                "    %(s)s, %(at)s + 60000"
                "    from r returning id, run_id, offer_id),"
                " l as (insert into ql.run_leases (attempt_id, lease_generation, token_digest, renewed_at_ms,"
                "    expires_at_ms) select a.id, 1, sha256(a.id::text::bytea), %(at)s, %(at)s + 60000 from a),"
                " e as (insert into ql.run_events (run_id, sequence, event_id, dedupe_key, type, actor_kind,"
                "    attempt_id, payload, occurred_at_ms)"
                "  select a.run_id, g, gen_random_uuid(), 'seed:' || a.run_id || ':' || g, 'run.noted', 'system', a.id,"
                '    \'{"note": "a finished Run"}\', %(at)s + g from a cross join generate_series(1, 6) g),'
                " s as (insert into ql.output_streams (attempt_id, stream) select a.id, 'stdout' from a"
                "  returning attempt_id)"
                " insert into ql.output_chunks (attempt_id, stream, byte_offset, data, received_at_ms)"
                "  select s.attempt_id, 'stdout', 0, convert_to(repeat('output line ', 16), 'UTF8'), %(at)s from s",
                {"at": at, "n": n, "rev": revision, "w": worker, "s": session},
            )


class _Writers:
    """WRITERS threads running whole lifecycles through ql_api as ql_runtime, every call timed (ms, with its start)."""

    def __init__(self, dsn: str, fixture: Fixture) -> None:
        self.calls: list[tuple[float, float]] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._loop, args=(dsn, *fixture.worker(1)), daemon=True) for _ in range(WRITERS)
        ]

    def _timed(self, conn: psycopg.Connection[Any], query: str, args: tuple[Any, ...] = ()) -> Any:
        began = time.monotonic()
        answer = scalar(conn, query, args)
        with self._lock:
            self.calls.append((began, (time.monotonic() - began) * 1000))
        return answer

    def _loop(self, dsn: str, worker: str, session: str) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as rt:
                while not self._stop.is_set():
                    one_lifecycle(rt, worker, session, self._timed)
        except BaseException as exc:  # reported by stop()
            self.errors.append(exc)

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def between(self, start: float, end: float) -> list[float]:
        with self._lock:
            return [ms for began, ms in self.calls if start <= began < end]

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()
        assert not self.errors, self.errors


class _Reader:
    """A report over ql.run_events: a repeatable-read transaction held open 1.5 s in every 3."""

    def __init__(self, dsn: str) -> None:
        self._stop = threading.Event()
        self.reports = 0
        self._thread = threading.Thread(target=self._loop, args=(dsn,), daemon=True)

    def _loop(self, dsn: str) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not self._stop.wait(1.5):
                with conn.transaction():
                    conn.execute("set transaction isolation level repeatable read")
                    conn.execute("select count(*) from ql.run_events")
                    self._stop.wait(1.5)
                self.reports += 1

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _cycles(env: Env) -> tuple[list[dict[str, Any]], list[str]]:
    """`CALL ql_api.retain()` as ql_scheduler until a cycle finished and no partition is left to drop: each cycle's
    wall seconds and its ql.retention_cycles row; the partitions dropped."""
    cycles: list[dict[str, Any]] = []
    with (
        psycopg.connect(env.dsn(DATABASE, "ql_scheduler"), autocommit=True) as scheduler,
        psycopg.connect(env.dsn(DATABASE), autocommit=True) as admin,
    ):
        tables = (
            "select inhrelid::regclass::text from pg_inherits join pg_class c on c.oid = inhrelid where c.relkind = 'r'"
        )
        before = {r[0] for r in admin.execute(tables).fetchall()}
        for _ in range(200):
            began = time.monotonic()
            scheduler.execute("call ql_api.retain()")
            seconds = time.monotonic() - began
            row = admin.execute(
                "select runs_pruned, backlog_runs, finished from ql.retention_cycles order by id desc limit 1"
            ).fetchone()
            assert row is not None
            cycles.append({"seconds": seconds, "runs": row[0], "backlog": row[1], "finished": row[2]})
            after = {r[0] for r in admin.execute(tables).fetchall()}
            if row[2] and "ql.run_events_phistory" not in after:
                break
    return cycles, sorted(before - after)


def _append_growth(env: Env, fixture: Fixture, snapshot: bool) -> tuple[float, float]:
    """Mean ms of the first and of the last 500 appends to one stream (1 KiB each, trimming from the 129th on) while
    another connection holds a repeatable-read snapshot open (or, for comparison, does not)."""
    with psycopg.connect(env.dsn(DATABASE), autocommit=True) as admin:
        admin.execute("update ql.settings set output_head_bytes = 65536, output_tail_bytes = 65536")
    worker, session = fixture.worker(1)
    fixture.queue(1)
    durations: list[float] = []
    with (
        psycopg.connect(env.dsn(DATABASE, "ql_runtime"), autocommit=True) as rt,
        psycopg.connect(env.dsn(DATABASE), autocommit=True) as holder,
    ):
        fence, _ = started_attempt(rt, worker, session)
        with holder.transaction():
            if snapshot:
                holder.execute("set transaction isolation level repeatable read")
                holder.execute("select count(*) from ql.output_chunks")
            data = os.urandom(APPEND_BYTES)
            for k in range(APPENDS):
                began = time.perf_counter()
                answer = scalar(rt, APPEND, (worker, session, *fence, k * APPEND_BYTES, data))
                durations.append((time.perf_counter() - began) * 1000)
                assert answer["status"] == "appended", answer
    trimming = durations[(65536 * 2) // APPEND_BYTES :]
    return statistics.fmean(trimming[:500]), statistics.fmean(trimming[-500:])


def _days_without_maintenance() -> tuple[int, int | None]:
    """The most days ahead (of CLOCK_DAYS) at which a whole lifecycle still wrote with nothing maintaining the
    database, and the first at which it failed (then one convergence cycle must make it work again)."""
    ok, failed = 0, None
    with faked_clock(fsync=True) as clock:
        for days in CLOCK_DAYS:
            clock.move(days)
            try:
                lifecycle(clock)
            except psycopg.errors.CheckViolation:
                failed = days
                converge(clock)
                lifecycle(clock)
                break
            ok = days
    return ok, failed


def run(env: Env, old_runs: int) -> Result:
    """Part (k) of `make bench`."""
    say(f"(k) retention: {old_runs:,} terminal Runs past the retention, pruned beside live writers")
    env.create_database(DATABASE)
    month = dt.datetime.now(dt.UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    old_ms = int((month - dt.timedelta(days=5)).timestamp() * 1000)  # last month: the events' history partition
    with (
        psycopg.connect(env.dsn(DATABASE), autocommit=True) as admin,
        psycopg.connect(env.dsn(DATABASE, "ql_runtime"), autocommit=True) as runtime,
    ):
        fixture = Fixture(admin, runtime)
        worker, session = fixture.worker(1)
        began = time.monotonic()
        _seed_old(admin, fixture.revision, worker, session, old_runs, old_ms)
        say(f"(k) seeded {old_runs:,} old Runs in {time.monotonic() - began:.0f} s")
        fixture.queue(50_000)
        admin.execute("update ql.settings set run_retention_days = 1")
        env.vacuum_analyze(DATABASE)

        writers = _Writers(env.dsn(DATABASE, "ql_runtime"), fixture)
        reader = _Reader(env.dsn(DATABASE))
        writers.start()
        time.sleep(BASELINE_S)
        maintenance_from = time.monotonic()
        reader.start()
        cycles, dropped = _cycles(env)
        maintenance_to = time.monotonic()
        reader.stop()
        writers.stop()
        baseline = writers.between(maintenance_from - BASELINE_S + 2, maintenance_from)
        during = writers.between(maintenance_from, maintenance_to)
        first_ms, last_ms = _append_growth(env, fixture, snapshot=True)
        control_first_ms, control_last_ms = _append_growth(env, fixture, snapshot=False)
    say("(k) the database clock moved ahead, nothing maintaining it")
    days_ok, days_failed = _days_without_maintenance()

    pruned = sum(c["runs"] for c in cycles)
    pruning_s = sum(c["seconds"] for c in cycles)
    per_hour_pruning = pruned / pruning_s * 3600
    figures = {
        "pruned_runs_per_hour": round(per_hour_pruning * SCHEDULE_BUDGET_S / SCHEDULE_EVERY_S),
        "pruned_runs_per_hour_while_pruning": round(per_hour_pruning),
        "backlog_runs_after": cycles[-1]["backlog"],
        "writer_wait_p99_ms_during_maintenance": round(percentile(during, 99), 1),
        "writer_p99_ms_baseline": round(percentile(baseline, 99), 1),
        "writer_calls_during_maintenance": len(during),
        "writes_ok_after_maintenance_stopped_days": days_ok,
        "writes_failed_after_days": days_failed,
        "output_append_ms_growth_with_open_snapshot": round(last_ms - first_ms, 3),
        "output_append_ms_growth_without_snapshot": round(control_last_ms - control_first_ms, 3),
        "old_runs": old_runs,
        "cycles": len(cycles),
        "partitions_dropped": len(dropped),
        "reports_held": reader.reports,
    }
    record_json("retention", figures)
    rows = [
        ["Runs pruned per hour, as scheduled", fmt(figures["pruned_runs_per_hour"]),
         f"{fmt(round(per_hour_pruning))} an hour while pruning, times {SCHEDULE_BUDGET_S} s in every "
         f"{SCHEDULE_EVERY_S} "
         "(must be ≥ 166,667: a day's million in six hours)"],
        ["backlog after", fmt(figures["backlog_runs_after"]), f"{len(cycles)} cycles of `CALL ql_api.retain()`"],
        ["writers' call p99 during maintenance", f"{figures['writer_wait_p99_ms_during_maintenance']} ms",
         f"{len(during):,} calls of {WRITERS} writers; must be ≤ 50 ms"],
        ["writers' call p99 before it", f"{figures['writer_p99_ms_baseline']} ms", "the same writers, no maintenance"],
        ["partitions dropped", ", ".join(dropped) or "none", f"beside a report held open ({reader.reports} times)"],
        ["writes after maintenance stopped", f"{days_ok} days",
         f"a whole lifecycle at +{', +'.join(map(str, CLOCK_DAYS))} days until one failed"
         + (f" (+{days_failed}: no partition; one convergence cycle mended it)" if days_failed else "")],
        ["append growth with an open snapshot", f"{figures['output_append_ms_growth_with_open_snapshot']} ms",
         f"{last_ms:.3f} ms (last 500 of {APPENDS:,}) minus {first_ms:.3f} ms (first 500 trimming)"],
        ["append growth, no open snapshot", f"{figures['output_append_ms_growth_without_snapshot']} ms",
         f"{control_last_ms:.3f} ms minus {control_first_ms:.3f} ms: the same appends, nothing holding a snapshot"],
    ]  # fmt: skip
    markdown = "## (k) Retention beside live writers\n\n" + table(["figure", "value", "what"], rows) + "\n"
    summary = [
        f"(k) retention: {fmt(figures['pruned_runs_per_hour'])} Runs/h as scheduled, backlog "
        f"{figures['backlog_runs_after']}, writers p99 {figures['writer_wait_p99_ms_during_maintenance']} ms during "
        f"maintenance, writes {days_ok} days without it, append growth "
        f"{figures['output_append_ms_growth_with_open_snapshot']} ms"
    ]
    return Result(markdown, summary, {"retention": figures})
