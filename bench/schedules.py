"""(l) Second-level schedules against the clock, on the bench cluster (fsync on): `--schedules` (40) tasks scheduled
`* * * * * *` (every second, overlap allow) while `CALL ql_api.schedule_tick()` runs as ql_scheduler the way the
pg_cron job `qinglong-schedule` runs it: started at each minute's start (this cluster has no pg_cron, so the
benchmark starts it; tests/integration/test_pg_cron.py shows the real job doing the same), for `--schedule-seconds`
(70) so that one minute's hand-over is measured. Each fire time's lag is ql.schedule_fires.decided_at_ms -
fire_at_ms (the database's clock at the decision, against the time the expression names); the first fire time of
each task (folded from the seconds before the first tick) is left out.

Its keys in bench/results.json, under `notify` (which the notification figures will join): schedule_fire_lag_p99_ms
and the figures it comes from (schedule_fires, schedule_fires_missed, schedule_fire_lag_p50_ms,
schedule_fire_lag_max_ms). Touches: database `schedules` of the bench cluster (created), bench/results.json.
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any, Final

import psycopg

from bench.report import RESULTS_JSON, Result, fmt, percentile, record_json, table
from tests.support.env import Env
from tests.support.progress import say

DATABASE: Final = "schedules"
START_DELAY_S: Final = 0.05  # after the minute's start, as a pg_cron job starts


def _tasks(conn: psycopg.Connection[Any], count: int) -> None:
    project = conn.execute("select ql_api.project_create_v1('schedules') ->> 'projectId'").fetchone()
    assert project is not None
    for n in range(count):
        conn.execute('select ql_api.task_create_v1(%s, %s, \'{"argv": ["true"]}\')', (project[0], f"tick-{n}"))
        row = conn.execute(
            "select ql_api.task_schedule_set_v1(%s, %s, '* * * * * *', 'UTC', 'allow')", (project[0], f"tick-{n}")
        ).fetchone()
        assert row is not None and row[0]["status"] == "set", row


def _tick(env: Env, seconds: float) -> None:
    """Run the tick as pg_cron would for `seconds`: at each minute's start, until 59.5 s into it."""
    end = time.time() + seconds
    with psycopg.connect(env.dsn(DATABASE, "ql_scheduler"), autocommit=True) as sched:
        while time.time() < end:
            left = end - time.time()
            until = min(59.5, time.time() % 60 + left)
            sched.execute("call ql_api.schedule_tick(%s::numeric)", (round(until, 1),))
            if time.time() < end:
                time.sleep(max(0.0, 60 - time.time() % 60 + START_DELAY_S))


def run(env: Env, count: int, seconds: float) -> Result:
    """Part (l) of `make bench`."""
    say(f"(l) schedules: {count} tasks every second, the tick run as pg_cron runs it for {seconds:.0f} s")
    env.create_database(DATABASE)
    with psycopg.connect(env.dsn(DATABASE), autocommit=True) as conn:
        _tasks(conn, count)
        started_ms = int(time.time() * 1000)
        _tick(env, seconds)
        rows = conn.execute(
            "select f.task_id, f.fire_at_ms, f.decided_at_ms - f.fire_at_ms from ql.schedule_fires f"
            " where f.fire_at_ms > %s + 1000 order by f.task_id, f.fire_at_ms",
            (started_ms,),
        ).fetchall()
    fires: dict[Any, list[int]] = {}
    for task, at, _ in rows:
        fires.setdefault(task, []).append(at)
    missed = sum(len(range(ats[0], ats[-1] + 1, 1000)) - len(ats) for ats in fires.values())
    lags = [float(lag) for _, _, lag in rows]
    figures = {
        "schedule_fires": len(rows),
        "schedule_fires_missed": missed,
        "schedule_fire_lag_p50_ms": round(percentile(lags, 50), 1),
        "schedule_fire_lag_p99_ms": round(percentile(lags, 99), 1),
        "schedule_fire_lag_max_ms": max(lags),
    }
    notify: dict[str, Any] = {}
    with contextlib.suppress(FileNotFoundError, ValueError, AttributeError):
        notify = dict(json.loads(RESULTS_JSON.read_text()).get("notify") or {})
    notify.update(figures)
    record_json("notify", notify)
    markdown = (
        "## (l) Second-level schedules\n\n"
        f"{count} tasks scheduled `* * * * * *` (overlap allow), {seconds:.0f} s of `CALL ql_api.schedule_tick()` as "
        "ql_scheduler, started at each minute's start as the pg_cron job `qinglong-schedule` is (this cluster has no "
        "pg_cron; tests/integration/test_pg_cron.py runs the real job). Lag: `decided_at_ms - fire_at_ms` of each fire "
        "time in `ql.schedule_fires`, the database's clock against the second the expression names; each task's "
        "first fire time (folded from before the first tick) left out.\n\n"
        + table(
            ["figure", "value", "what"],
            [
                ["fire times handled", fmt(figures["schedule_fires"]), "each a queued Run, once by its key"],
                ["fire times missed", str(missed), "a task's seconds between its first and last fire with no row"],
                ["lag p50", f"{figures['schedule_fire_lag_p50_ms']} ms", ""],
                ["lag p99", f"{figures['schedule_fire_lag_p99_ms']} ms", "target ≤ 1000 ms"],
                ["lag max", f"{fmt(figures['schedule_fire_lag_max_ms'])} ms", "includes the minute's hand-over"],
            ],
        )
        + "\n"
    )  # fmt: skip
    summary = [
        f"(l) schedules: {figures['schedule_fires']} fire times, {missed} missed, lag p50 "
        f"{figures['schedule_fire_lag_p50_ms']} ms, p99 {figures['schedule_fire_lag_p99_ms']} ms, max "
        f"{fmt(figures['schedule_fire_lag_max_ms'])} ms"
    ]
    return Result(markdown, summary, figures)
