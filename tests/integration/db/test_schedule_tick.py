"""Second-level schedules (6-field cron) fired by `CALL ql_api.schedule_tick()` as pg_cron runs it (autocommit,
ql_scheduler): a task scheduled every second and one every two seconds are each fired once per fire time, each
decided within a second of its time by the database's clock (ql.schedule_fires: decided_at_ms - fire_at_ms), and
the tick returns at the second of the minute it was given. A 5-field schedule set beside them is not fired before
its minute. Measured against the clock: the tick runs for real, sleeping between fire times.

Touches: one fresh database.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any, Final

import psycopg
import pytest

from tests.conftest import Database
from tests.integration.db.factories import call, make_project

pytestmark = pytest.mark.db

TICK_S: Final = 4  # how long the tick runs
LAG_MS: Final = 1000  # "within a second of their time"


def schedule(conn: psycopg.Connection[Any], project: Any, name: str, cron: str) -> int:
    call(conn, "ql_api.task_create_v1(%s, %s, %s)", (project, name, '{"argv": ["true"]}'))
    result = call(conn, "ql_api.task_schedule_set_v1(%s, %s, %s, 'UTC', 'allow')", (project, name, cron))
    assert result["status"] == "set", result
    return int(result["nextFireAtMs"])


def test_second_schedules_fire_once_each_within_a_second(database: Database) -> None:
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        now = datetime.now()
        if now.second + now.microsecond / 1e6 > 59.5 - TICK_S - 2:  # the tick's window must fit in this minute
            time.sleep(60.5 - now.second - now.microsecond / 1e6)
        project = make_project(conn, "ticks")
        first = {
            name: schedule(conn, project, name, cron)
            for name, cron in (
                ("every-second", "* * * * * *"),
                ("every-two", "*/2 * * * * *"),
                ("every-minute", "* * * * *"),
            )
        }
        until = datetime.now().second + datetime.now().microsecond / 1e6 + TICK_S
        with psycopg.connect(database.dsn("ql_scheduler"), autocommit=True) as sched:
            started = time.monotonic()
            sched.execute("call ql_api.schedule_tick(%s::numeric)", (round(until, 1),))
            ran = time.monotonic() - started
        fires = {
            name: conn.execute(
                "select f.fire_at_ms, f.decided_at_ms, f.outcome from ql.schedule_fires f join ql.tasks t"
                " on t.id = f.task_id where t.name = %s and t.project_id = %s order by f.fire_at_ms",
                (name, project),
            ).fetchall()
            for name in first
        }  # fmt: skip
    assert TICK_S - 1.5 <= ran <= TICK_S + 1.0, f"the tick ran {ran:.1f} s for a window of {TICK_S} s"
    for name, step in (("every-second", 1000), ("every-two", 2000)):
        times = [f[0] for f in fires[name]]
        assert times[0] == first[name] and len(times) >= TICK_S * 1000 // step - 1, (name, fires[name])
        assert times == list(range(times[0], times[0] + step * len(times), step)), f"{name}: each fire time once"
        assert {f[2] for f in fires[name]} == {"enqueued"}, fires[name]
        lags = [decided - at for at, decided, _ in fires[name]]
        assert all(0 <= lag <= LAG_MS for lag in lags), f"{name}: lags {lags} ms"
    assert fires["every-minute"] == [] or fires["every-minute"][0][0] == first["every-minute"], fires["every-minute"]
    assert len(fires["every-minute"]) <= 1
