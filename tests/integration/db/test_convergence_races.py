"""Two and four cancellation convergers at once over 5,000 cancelled Runs (decision 0000 (ADR-0118 §7)): each Run is
converged exactly once, with its stable event IDs and no duplicate event, and a claim whose Lease is
still active stays blocked, never faked.

Population: 88 % queued Runs with only a user cancel intent, 10 % whose claimed Attempt's Lease
expired (attempt.cancelled then run.cancelled), 2 % whose claimed Attempt's Lease is active
(blocked). Each converger is its own ql_scheduler connection looping
`ql_api.run_cancellation_converge_v1(128)` until a page converges nothing and scans only blocked
Runs. Touches: one fresh database per case.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest

from tests.conftest import Database
from tests.integration.db.factories import (
    acall,
    duplicate_events,
    make_project,
    make_revision,
    make_runs,
    make_worker,
    open_session,
    pull_many,
    stream_faults,
)

pytestmark = [pytest.mark.db, pytest.mark.race]

RUNS = 5000
EXPIRED_CLAIMS = 500  # 10 %: claimed, Lease expired → attempt.cancelled, run.cancelled
HELD_CLAIMS = 100  # 2 %: claimed, Lease active → blocked
PAGE = 128
MAX_PAGES_PER_CONVERGER = 200  # bounds the loop; the whole work is about 45 pages

PLAIN_STREAM = ["run.queued", "run.cancel_requested", "run.cancelled"]
EXPIRED_STREAM = ["run.queued", "run.cancel_requested", "attempt.cancelled", "run.cancelled"]
HELD_STREAM = ["run.queued", "run.cancel_requested"]


@dataclass(frozen=True)
class Population:
    plain: frozenset[str]
    expired: dict[str, str]  # run → its claimed Attempt with an expired Lease
    held: dict[str, str]  # run → its claimed Attempt with an active Lease


@dataclass
class Tally:
    """What one converger's pages reported."""

    name: int
    pages: int = 0
    converged: list[str] = field(default_factory=list)
    blocked: set[str] = field(default_factory=set)
    empty_pages: int = 0


def build_population(db: Database) -> Population:
    with psycopg.connect(db.dsn(), autocommit=True) as conn:
        project = make_project(conn, "converge-race")
        plain = make_runs(conn, make_revision(conn, project, {"argv": ["true"]}), RUNS - EXPIRED_CLAIMS - HELD_CLAIMS)
        make_runs(conn, make_revision(conn, project, {"argv": ["true"], "pool": "expired"}), EXPIRED_CLAIMS)
        make_runs(conn, make_revision(conn, project, {"argv": ["true"], "pool": "held"}), HELD_CLAIMS)
        workers = make_worker(conn, "expired"), make_worker(conn, "held")
    with psycopg.connect(db.runtime_dsn, autocommit=True) as rt:
        expired = pull_many(rt, open_session(rt, workers[0], EXPIRED_CLAIMS), EXPIRED_CLAIMS)
        held = pull_many(rt, open_session(rt, workers[1], HELD_CLAIMS), HELD_CLAIMS)
    with psycopg.connect(db.dsn(), autocommit=True) as conn:
        # Expired: the Lease (= offer expiry) lies a minute in the past. Held: ten minutes ahead, so
        # no Lease can run out during the test.
        conn.execute(
            "update ql.run_leases set expires_at_ms = ql.now_ms() - 60000 where attempt_id = any(%s)",
            ([o.attempt_id for o in expired],),
        )
        conn.execute(
            "update ql.run_leases set expires_at_ms = ql.now_ms() + 600000 where attempt_id = any(%s)",
            ([o.attempt_id for o in held],),
        )
        # One set-based statement writes every intent (with its run.cancel_requested event); ordering
        # by id interleaves the three kinds in the convergers' (cancel time, id) order.
        row = conn.execute(
            "select count(ql.run_cancel_intent(r.id, 'user', 'user', null, ql.now_ms()))"
            " from (select id from ql.runs order by id) r"
        ).fetchone()
        assert row == (RUNS,)
    return Population(
        frozenset(str(r) for r in plain),
        {str(o.run_id): str(o.attempt_id) for o in expired},
        {str(o.run_id): str(o.attempt_id) for o in held},
    )


async def converger(db: Database, tally: Tally, barrier: asyncio.Barrier) -> None:
    async with await psycopg.AsyncConnection.connect(db.dsn("ql_scheduler"), autocommit=True) as conn:
        await barrier.wait()
        for _ in range(MAX_PAGES_PER_CONVERGER):
            page = await acall(conn, "ql_api.run_cancellation_converge_v1(%s)", (PAGE,))
            assert page["status"] == "ok", page
            assert page["scanned"] == page["converged"] + page["blocked"] <= PAGE, page
            assert len(page["convergedRunIds"]) == page["converged"], page
            assert len(page["blockedRunIds"]) == page["blocked"], page
            tally.pages += 1
            tally.converged.extend(page["convergedRunIds"])
            tally.blocked.update(page["blockedRunIds"])
            if page["converged"] == 0 and page["scanned"] == page["blocked"]:
                # Only blocked Runs (or none) were left for this converger: everything else is
                # converged or locked by another converger that is converging it right now.
                tally.empty_pages += 1
                return
        raise AssertionError(f"converger {tally.name} did not finish in {MAX_PAGES_PER_CONVERGER} pages")


def check_database(db: Database, pop: Population) -> None:
    with psycopg.connect(db.dsn(), autocommit=True) as conn:
        assert stream_faults(conn) == []
        assert duplicate_events(conn) == (0, 0)

        rows = conn.execute(
            "select r.id::text, r.status, r.version, r.event_sequence, r.current_attempt_id::text,"
            " array_agg(e.type order by e.sequence)"
            " from ql.runs r join ql.run_events e on e.run_id = r.id group by r.id"
        ).fetchall()
        assert len(rows) == RUNS
        for run, status, version, sequence, current, types in rows:
            if run in pop.held:
                assert (status, types, current) == ("queued", HELD_STREAM, pop.held[run]), run
            elif run in pop.expired:
                assert (status, types, current) == ("cancelled", EXPIRED_STREAM, None), run
            else:
                assert run in pop.plain
                assert (status, types, current) == ("cancelled", PLAIN_STREAM, None), run
            assert version == 1 + sequence == 1 + len(types), run

        attempts: dict[str, str] = dict(conn.execute("select id::text, status from ql.run_attempts").fetchall())
        assert Counter(attempts[a] for a in pop.expired.values()) == {"cancelled": EXPIRED_CLAIMS}
        assert Counter(attempts[a] for a in pop.held.values()) == {"claimed": HELD_CLAIMS}

        # Every convergence event carries the stable id of decision 0000 (ADR-0118 §7), recomputed here in SQL.
        stable = conn.execute(
            "select count(*), count(*) filter (where e.event_id = ql.stable_event_id("
            "   case e.type when 'attempt.cancelled' then 'ql.converge.attempt' else 'ql.converge.run' end,"
            "   e.run_id, e.attempt_id, r.cancel_requested_at_ms)),"
            " count(*) filter (where e.occurred_at_ms < r.cancel_requested_at_ms)"
            " from ql.run_events e join ql.runs r on r.id = e.run_id where e.actor_kind = 'reconciler'"
        ).fetchone()
        expected_events = len(pop.plain) + 2 * len(pop.expired)
        assert stable == (expected_events, expected_events, 0)


@pytest.mark.parametrize("convergers", [2, 4])
async def test_concurrent_convergers_converge_each_cancelled_run_exactly_once(
    database: Database, convergers: int
) -> None:
    pop = build_population(database)
    assert len(pop.plain) + len(pop.expired) + len(pop.held) == RUNS

    tallies = [Tally(i) for i in range(convergers)]
    barrier = asyncio.Barrier(convergers)
    started = time.monotonic()
    await asyncio.gather(*(converger(database, t, barrier) for t in tallies))
    elapsed = time.monotonic() - started

    converged = Counter(run for t in tallies for run in t.converged)
    twice = {run: n for run, n in converged.items() if n > 1}
    assert twice == {}, f"Runs converged more than once: {twice}"
    assert set(converged) == set(pop.plain) | set(pop.expired)
    blocked = set().union(*(t.blocked for t in tallies))
    assert blocked == set(pop.held), "blocked must be exactly the Runs whose claim holds an active Lease"

    print(
        f"\n{convergers} convergers over {RUNS} Runs in {elapsed:.2f}s: "
        + ", ".join(f"#{t.name} converged {len(t.converged)} in {t.pages} pages" for t in tallies)
    )
    # The race really happened: more than one converger converged something.
    assert sum(1 for t in tallies if t.converged) > 1, [len(t.converged) for t in tallies]

    check_database(database, pop)

    # A further page converges nothing and still reports the held claims blocked, never faked.
    async with await psycopg.AsyncConnection.connect(database.dsn("ql_scheduler"), autocommit=True) as conn:
        page: dict[str, Any] = await acall(conn, "ql_api.run_cancellation_converge_v1(%s)", (PAGE,))
    assert (page["converged"], page["blocked"]) == (0, HELD_CLAIMS), page
    assert set(page["blockedRunIds"]) == set(pop.held)
