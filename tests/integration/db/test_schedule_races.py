"""The scheduler page (`ql_api.schedule_fire_v1`) with more than one scheduler at once: two ql_scheduler
connections page over the same due fire times, round after round, and each (task, fire time) is handled
exactly once: one row of ql.schedule_fires, and for an `allow` schedule exactly one Run whose run.queued
event names that fire time (counted from the Runs, not from the primary key that guards them); a `skip`
schedule enqueues its first fire time and skips the rest while that Run is live. A schedule whose row
another transaction holds is skipped (SKIP LOCKED) without waiting, and handled once the lock is gone. And
`CALL ql_api.converge()` as pg_cron runs it (autocommit, ql_scheduler) ends with the scheduler's pages. A
schedule change racing a scheduler pass over a due fire time (decision 0019) handles it once, whichever commits
first: the change waits for the pass's row lock and finds the fire time handled, or the pass skips the change's
lock and finds the schedule no longer due.

Touches: one fresh database per test.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest

from tests.conftest import Database
from tests.integration.db.factories import (
    acall,
    await_lock_wait,
    call,
    duplicate_events,
    make_project,
    make_revision,
    stream_faults,
)

pytestmark = [pytest.mark.db, pytest.mark.race]

ALLOW = 120  # schedules that enqueue every fire time
SKIP = 20  # schedules that skip a fire time while their first Run is still queued
ROUNDS = 25
PAGE = 16
MAX_PAGES = 64  # per scheduler per round: bounds the loop (a round is about 9 pages of work)


@dataclass
class Tally:
    """What one scheduler's pages reported over every round."""

    name: int
    pages: int = 0
    scanned: int = 0
    enqueued: int = 0
    skipped: int = 0
    duplicates: int = 0
    per_round: list[int] = field(default_factory=list)


def schedules(conn: psycopg.Connection[Any], count: int, overlap: str) -> list[uuid.UUID]:
    """`count` tasks of a Project, each with an every-minute schedule (UTC) parked in 2100."""
    project = make_project(conn)
    tasks: list[uuid.UUID] = []
    for _ in range(count):
        revision = make_revision(conn, project, {"argv": ["true"]})
        row = conn.execute(
            "insert into ql.task_schedules (task_id, project_id, cron, timezone, overlap, next_fire_at_ms,"
            " created_at_ms, updated_at_ms)"
            " select r.task_id, r.project_id, '* * * * *', 'UTC', %s, 4102444800000, ql.now_ms(), ql.now_ms()"
            " from ql.task_execution_revisions r where r.id = %s returning task_id",
            (overlap, revision),
        ).fetchone()
        assert row is not None
        tasks.append(row[0])
    return tasks


def minute_ms(conn: psycopg.Connection[Any], minutes_ago: int) -> int:
    """The whole minute `minutes_ago` minutes before the database's now, in ms."""
    row = conn.execute(
        "select (extract(epoch from date_trunc('minute', clock_timestamp())) * 1000)::bigint - %s * 60000",
        (minutes_ago,),
    ).fetchone()
    assert row is not None
    value: int = row[0]
    return value


def make_due(conn: psycopg.Connection[Any], fire_at_ms: int) -> None:
    """Every schedule's cursor at one fire time in the past (a whole minute, as the scheduler writes)."""
    conn.execute("update ql.task_schedules set next_fire_at_ms = %s", (fire_at_ms,))


async def scheduler(db: Database, tally: Tally, barrier: asyncio.Barrier, rounds: asyncio.Queue[int | None]) -> None:
    async with await psycopg.AsyncConnection.connect(db.dsn("ql_scheduler"), autocommit=True) as conn:
        while (await rounds.get()) is not None:
            await barrier.wait()  # both schedulers start each round together
            handled = 0
            for _ in range(MAX_PAGES):
                page: dict[str, Any] = await acall(conn, "ql_api.schedule_fire_v1(%s)", (PAGE,))
                assert page["status"] == "ok", page
                assert page["scanned"] == page["enqueued"] + page["skipped"] + page["duplicates"] <= PAGE, page
                tally.pages += 1
                tally.scanned += page["scanned"]
                tally.enqueued += page["enqueued"]
                tally.skipped += page["skipped"]
                tally.duplicates += page["duplicates"]
                handled += page["scanned"]
                if page["scanned"] < PAGE:  # the stop rule of ql_api.converge
                    break
            else:
                raise AssertionError(f"scheduler {tally.name} did not finish a round in {MAX_PAGES} pages")
            tally.per_round.append(handled)
            await barrier.wait()  # the round is over for both before the next is made due


async def test_two_schedulers_enqueue_each_fire_time_exactly_once(database: Database) -> None:
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        allow = schedules(conn, ALLOW, "allow")
        skip = schedules(conn, SKIP, "skip")
        # A distinct whole minute per round, all in the past: round r fires ROUNDS + 10 - r minutes ago.
        fire_times = [minute_ms(conn, ROUNDS + 10 - r) for r in range(ROUNDS)]

        tallies = [Tally(0), Tally(1)]
        barrier = asyncio.Barrier(2)
        queues: list[asyncio.Queue[int | None]] = [asyncio.Queue(), asyncio.Queue()]
        workers = [
            asyncio.create_task(scheduler(database, t, barrier, q)) for t, q in zip(tallies, queues, strict=True)
        ]
        started = time.monotonic()
        for r, fire_at in enumerate(fire_times):
            make_due(conn, fire_at)
            (round_start,) = conn.execute("select ql.now_ms()").fetchone() or (0,)
            for q in queues:
                q.put_nowait(r)
            while sum(len(t.per_round) for t in tallies) < 2 * (r + 1):
                assert not any(w.done() for w in workers), [w.exception() for w in workers if w.done()]
                await asyncio.sleep(0.005)
            # Due as of the round's start: a schedule fired just before a minute boundary is due again at it.
            due = conn.execute(
                "select count(*) from ql.task_schedules where next_fire_at_ms <= %s", (round_start,)
            ).fetchone()
            assert due == (0,), f"round {r}: schedules left due after both schedulers stopped"
        for q in queues:
            q.put_nowait(None)
        await asyncio.gather(*workers)
        elapsed = time.monotonic() - started

        # Each (task, fire time) has exactly one fire row; none is missing.
        fires = conn.execute(
            "select task_id, fire_at_ms, outcome from ql.schedule_fires where fire_at_ms = any(%s)", (fire_times,)
        ).fetchall()
        keys = Counter((task, fire_at) for task, fire_at, _ in fires)
        assert max(keys.values()) == 1
        assert set(keys) == {(task, fire_at) for task in allow + skip for fire_at in fire_times}

        # Counted from the Runs themselves: one Run per (allow task, fire time), named by its run.queued event.
        runs = conn.execute(
            "select r.task_id, (e.payload ->> 'scheduledFireAtMs')::bigint from ql.runs r"
            " join ql.run_events e on e.run_id = r.id and e.sequence = 1 and e.type = 'run.queued'"
            " where e.actor_kind = 'system' and e.payload ? 'scheduledFireAtMs'"
        ).fetchall()
        per_fire = Counter((task, fire_at) for task, fire_at in runs)
        twice = {k: n for k, n in per_fire.items() if n > 1}
        assert twice == {}, f"fire times enqueued more than once: {twice}"
        assert set(per_fire) == {(t, f) for t in allow for f in fire_times} | {(t, fire_times[0]) for t in skip}
        outcomes = Counter(outcome for task, _, outcome in fires if task in set(skip))
        assert outcomes == {"enqueued": SKIP, "skipped_overlap": SKIP * (ROUNDS - 1)}

        # What the pages reported adds up to the same, with no duplicate.
        assert sum(t.scanned for t in tallies) == (ALLOW + SKIP) * ROUNDS
        assert sum(t.enqueued for t in tallies) == ALLOW * ROUNDS + SKIP == len(runs)
        assert sum(t.skipped for t in tallies) == SKIP * (ROUNDS - 1)
        assert sum(t.duplicates for t in tallies) == 0
        assert stream_faults(conn) == []
        assert duplicate_events(conn) == (0, 0)

    print(
        f"\n2 schedulers, {ROUNDS} rounds of {ALLOW + SKIP} due schedules in {elapsed:.2f}s: "
        + ", ".join(f"#{t.name} handled {t.scanned} in {t.pages} pages" for t in tallies)
    )
    # The race really happened: both schedulers handled fire times, in most rounds.
    assert all(t.scanned > 0 for t in tallies), [t.scanned for t in tallies]
    assert sum(1 for a, b in zip(tallies[0].per_round, tallies[1].per_round, strict=True) if a and b) > ROUNDS // 2


def test_a_locked_schedule_is_skipped_without_waiting_and_handled_once_released(database: Database) -> None:
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        tasks = schedules(conn, 3, "allow")
        fire_at = minute_ms(conn, 10)
        make_due(conn, fire_at)
    locked = tasks[1]
    with (
        psycopg.connect(database.dsn()) as holder,
        psycopg.connect(database.dsn("ql_scheduler"), autocommit=True) as sched,
    ):
        holder.execute("select 1 from ql.task_schedules where task_id = %s for no key update", (locked,))
        sched.execute("set statement_timeout = '5s'")  # a page that waited for the lock would fail here
        started = time.monotonic()
        page = call(sched, "ql_api.schedule_fire_v1(%s)", (PAGE,))
        waited = time.monotonic() - started
        assert page == {"status": "ok", "scanned": 2, "enqueued": 2, "skipped": 0, "duplicates": 0}, page
        assert waited < 2.0, f"the page waited {waited:.2f}s for a locked schedule"
        handled = {r[0] for r in holder.execute("select task_id from ql.schedule_fires").fetchall()}
        assert handled == {tasks[0], tasks[2]}, "the locked schedule was skipped, the others handled"
        assert call(sched, "ql_api.schedule_fire_v1(%s)", (PAGE,))["scanned"] == 0, "still locked: nothing to take"
        holder.rollback()  # the lock is gone

        page = call(sched, "ql_api.schedule_fire_v1(%s)", (PAGE,))
        assert page == {"status": "ok", "scanned": 1, "enqueued": 1, "skipped": 0, "duplicates": 0}, page
        rows = holder.execute("select count(*) from ql.task_schedules where next_fire_at_ms <= %s", (fire_at,))
        assert rows.fetchone() == (0,)
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        per_task = conn.execute("select task_id, count(*) from ql.runs group by task_id").fetchall()
        assert sorted(per_task) == sorted((t, 1) for t in tasks)


def test_a_converge_cycle_ends_with_the_scheduler(database: Database) -> None:
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        tasks = schedules(conn, 5, "skip")
        fire_at = minute_ms(conn, 3)
        make_due(conn, fire_at)
    with psycopg.connect(database.dsn("ql_scheduler"), autocommit=True) as sched:
        sched.execute("call ql_api.converge(2, 64, 30000)")  # pages of 2: three scheduler pages, each committed
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        fires = conn.execute("select task_id, fire_at_ms, outcome, caught_up from ql.schedule_fires").fetchall()
        assert sorted(fires) == sorted((t, fire_at, "enqueued", True) for t in tasks)
        queued = conn.execute("select task_id, status from ql.runs").fetchall()
        assert sorted(queued) == sorted((t, "queued") for t in tasks)
        assert conn.execute(
            "select count(*) from ql.task_schedules where next_fire_at_ms <= ql.now_ms()"
        ).fetchone() == (0,)
        assert stream_faults(conn) == []


def one_due_schedule(db: Database) -> tuple[uuid.UUID, int]:
    """One task with an every-minute `allow` schedule whose cursor is this minute's start: due, unhandled."""
    with psycopg.connect(db.dsn(), autocommit=True) as conn:
        [task] = schedules(conn, 1, "allow")
        fire_at = minute_ms(conn, 0)
        make_due(conn, fire_at)
    return task, fire_at


def change_to_daily(conn: psycopg.Connection[Any], task: uuid.UUID) -> dict[str, Any]:
    """`task_schedule_set_v1`: the task's schedule changed to 03:00 UTC daily (as the operator's CLI calls it)."""
    row = conn.execute("select project_id, name from ql.tasks where id = %s", (task,)).fetchone()
    assert row is not None
    return call(conn, "ql_api.task_schedule_set_v1(%s, %s, '0 3 * * *', 'UTC', 'allow')", (row[0], row[1]))


def one_fire(conn: psycopg.Connection[Any], task: uuid.UUID, fire_at: int) -> None:
    """The due fire time was handled exactly once (one fire row, one Run) and the cursor is the new expression's."""
    fires = conn.execute("select fire_at_ms, outcome from ql.schedule_fires where task_id = %s", (task,)).fetchall()
    assert fires == [(fire_at, "enqueued")], fires
    runs = conn.execute("select count(*) from ql.runs where task_id = %s", (task,)).fetchone()
    assert runs == (1,), runs
    cursor = conn.execute(
        "select cron, next_fire_at_ms > ql.now_ms() from ql.task_schedules where task_id = %s", (task,)
    ).fetchone()
    assert cursor == ("0 3 * * *", True), cursor


def test_a_change_waiting_for_a_scheduler_pass_finds_the_due_fire_time_handled(database: Database) -> None:
    task, fire_at = one_due_schedule(database)
    with (
        ThreadPoolExecutor(1) as pool,
        psycopg.connect(database.dsn("ql_scheduler")) as sched,
        psycopg.connect(database.dsn(), autocommit=True) as observer,
    ):
        page = call(sched, "ql_api.schedule_fire_v1(%s)", (PAGE,))  # not committed: the row stays locked
        assert page == {"status": "ok", "scanned": 1, "enqueued": 1, "skipped": 0, "duplicates": 0}, page

        def change() -> dict[str, Any]:
            with psycopg.connect(database.dsn(), autocommit=True) as operator:
                return change_to_daily(operator, task)

        changed = pool.submit(change)
        await_lock_wait(observer, "query like '%%task_schedule_set_v1%%'")  # the change waits for the pass's row lock
        sched.commit()
        assert changed.result(timeout=10)["status"] == "set"
        one_fire(observer, task, fire_at)


def test_a_scheduler_pass_skips_a_change_in_flight_and_finds_the_fire_time_handled(database: Database) -> None:
    task, fire_at = one_due_schedule(database)
    with (
        psycopg.connect(database.dsn()) as operator,
        psycopg.connect(database.dsn("ql_scheduler"), autocommit=True) as sched,
    ):
        assert change_to_daily(operator, task)["status"] == "set"  # not committed: the row stays locked
        sched.execute("set statement_timeout = '5s'")  # a page that waited for the lock would fail here
        empty = {"status": "ok", "scanned": 0, "enqueued": 0, "skipped": 0, "duplicates": 0}
        assert call(sched, "ql_api.schedule_fire_v1(%s)", (PAGE,)) == empty, "the locked row is skipped"
        operator.commit()
        assert call(sched, "ql_api.schedule_fire_v1(%s)", (PAGE,)) == empty, "and no longer due once committed"
        one_fire(operator, task, fire_at)
