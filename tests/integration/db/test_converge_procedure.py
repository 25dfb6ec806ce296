"""`CALL ql_api.converge(page_size, max_pages, grace_ms)` for real, as pg_cron runs it: an autocommit
ql_scheduler connection. One call converges every cancelled Run in pages that commit one by one,
stops early on a short page, is bounded by max_pages, and in the same cycle recovers an expired
claim and requeues a due retry_wait Run. Out-of-range bounds raise 22023, a CALL inside an explicit
transaction fails (invalid transaction termination), and ql_runtime may not call it.
Touches: one fresh database per test; two tests turn on track_functions for it to count pages.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.conftest import Database
from tests.integration.db.factories import (
    activate,
    call,
    complete,
    duplicate_events,
    event_types,
    lease_version,
    make_project,
    make_revision,
    make_runs,
    make_worker,
    open_session,
    pull,
    pull_many,
    stream_faults,
)

pytestmark = pytest.mark.db

CANCELLED = ["run.queued", "run.cancel_requested", "run.cancelled"]


def converge(conn: psycopg.Connection[Any], page_size: int | None, max_pages: int | None, grace_ms: int | None) -> None:
    conn.execute("call ql_api.converge(%s, %s, %s)", (page_size, max_pages, grace_ms))


def cancel_in_order(conn: psycopg.Connection[Any], runs: Sequence[uuid.UUID]) -> None:
    """User cancel intents (superuser fixture), the i-th one i ms after the first, so the
    convergence order (intent time, id) is exactly `runs`."""
    row = conn.execute(
        "select count(ql.run_cancel_intent(q.id, 'user', 'user', null, ql.now_ms() + q.n))"
        " from unnest(%s::uuid[]) with ordinality q(id, n)",
        (list(runs),),
    ).fetchone()
    assert row == (len(runs),)


def statuses(conn: psycopg.Connection[Any], runs: Sequence[uuid.UUID]) -> list[str]:
    rows = dict(conn.execute("select id, status from ql.runs where id = any(%s)", (list(runs),)).fetchall())
    return [rows[r] for r in runs]


def track_pages(db: Database) -> None:
    """Count PL/pgSQL calls in this database (track_functions), so a test can see how many pages ran."""
    with psycopg.connect(db.dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("alter database {} set track_functions = 'pl'").format(sql.Identifier(db.name)))


def pages_run(db: Database, expected: tuple[int, int]) -> tuple[int, int]:
    """(convergence pages, lease-expiry pages) called so far in this database. A backend reports its
    function statistics when it goes idle or exits, so poll (briefly) until `expected` shows up."""
    deadline = time.monotonic() + 5
    with psycopg.connect(db.dsn(), autocommit=True) as conn:
        while True:
            row = conn.execute(
                "select coalesce(sum(calls) filter (where funcid ="
                "   'ql_api.run_cancellation_converge_v1(integer)'::regprocedure), 0)::int,"
                " coalesce(sum(calls) filter (where funcid ="
                "   'ql_api.lease_expiry_reconcile_v1(integer, bigint)'::regprocedure), 0)::int"
                " from pg_stat_user_functions"
            ).fetchone()
            assert row is not None
            seen = (row[0], row[1])
            if seen == expected or time.monotonic() > deadline:
                return seen
            time.sleep(0.02)


def cancelled_queued_runs(db: Database, count: int) -> list[uuid.UUID]:
    with psycopg.connect(db.dsn(), autocommit=True) as conn:
        runs = make_runs(conn, make_revision(conn, make_project(conn), {"argv": ["true"]}), count)
        cancel_in_order(conn, runs)
    return runs


def test_one_call_converges_ten_cancelled_runs_in_pages_of_three(database: Database) -> None:
    track_pages(database)
    runs = cancelled_queued_runs(database, 10)
    with psycopg.connect(database.dsn("ql_scheduler"), autocommit=True) as scheduler:
        converge(scheduler, 3, 64, 30000)
    # Pages of 3, 3, 3 and 1 Runs: the short fourth page ends convergence, far below max_pages; the
    # one lease-expiry page finds nothing (short) and ends the cycle.
    assert pages_run(database, (4, 1)) == (4, 1)
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        assert statuses(conn, runs) == ["cancelled"] * 10
        assert all(event_types(conn, r) == CANCELLED for r in runs)
        stable = conn.execute(
            "select count(*) from ql.run_events e join ql.runs r on r.id = e.run_id"
            " where e.type = 'run.cancelled' and e.actor_kind = 'reconciler'"
            " and e.event_id = ql.stable_event_id('ql.converge.run', r.id, null, r.cancel_requested_at_ms)"
        ).fetchone()
        assert stable == (10,)
        before = conn.execute("select r::text from ql.runs r order by id").fetchall()
    with psycopg.connect(database.dsn("ql_scheduler"), autocommit=True) as scheduler:
        scheduler.execute("call ql_api.converge()")  # pg_cron's exact command: nothing is left to do
    assert pages_run(database, (5, 2)) == (5, 2)  # one empty page of each kind
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        assert conn.execute("select r::text from ql.runs r order by id").fetchall() == before
        assert stream_faults(conn) == []
        assert duplicate_events(conn) == (0, 0)


def test_max_pages_bounds_one_cycle(database: Database) -> None:
    track_pages(database)
    runs = cancelled_queued_runs(database, 10)
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        with psycopg.connect(database.dsn("ql_scheduler"), autocommit=True) as scheduler:
            converge(scheduler, 3, 2, 30000)
        # Two full pages of three: the six oldest intents, and not one more.
        assert pages_run(database, (2, 1)) == (2, 1)
        assert statuses(conn, runs) == ["cancelled"] * 6 + ["queued"] * 4
        with psycopg.connect(database.dsn("ql_scheduler"), autocommit=True) as scheduler:
            converge(scheduler, 3, 2, 30000)
        assert pages_run(database, (4, 2)) == (4, 2)  # a full page, then a short one (one Run)
        assert statuses(conn, runs) == ["cancelled"] * 10
        assert stream_faults(conn) == []


def test_each_page_commits_before_the_next_one_starts(database: Database) -> None:
    """Six cancelled Runs nobody holds, then four whose expired claim still names an Attempt. A lock
    on the eighth Run's Attempt stalls page three; meanwhile an observer already sees pages one and
    two committed (six Runs cancelled) and nothing of page three."""
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        project = make_project(conn)
        plain = make_runs(conn, make_revision(conn, project, {"argv": ["true"]}), 6)
        claimed = make_runs(conn, make_revision(conn, project, {"argv": ["true"], "pool": "claim"}), 4)
        worker = make_worker(conn, "claim")
    with psycopg.connect(database.runtime_dsn, autocommit=True) as rt:
        offers = pull_many(rt, open_session(rt, worker, 4), 4)
    assert [o.run_id for o in offers] == claimed
    order = [*plain, *claimed]
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        conn.execute(
            "update ql.run_leases set expires_at_ms = ql.now_ms() - 60000 where attempt_id = any(%s)",
            ([o.attempt_id for o in offers],),
        )
        cancel_in_order(conn, order)

    def cycle() -> None:
        with psycopg.connect(database.dsn("ql_scheduler"), autocommit=True) as scheduler:
            converge(scheduler, 3, 64, 6000)

    # Exit order matters on failure: the holder rolls back (releasing the cycle) before the pool joins.
    with (
        ThreadPoolExecutor(1) as pool,
        psycopg.connect(database.dsn(), autocommit=True) as observer,
        psycopg.connect(database.dsn()) as holder,
    ):
        holder.execute("select 1 from ql.run_attempts where id = %s for update", (offers[1].attempt_id,))
        running = pool.submit(cycle)
        deadline = time.monotonic() + 10
        while True:
            waiting = observer.execute(
                "select count(*) from pg_stat_activity where datname = current_database()"
                " and usename = 'ql_scheduler' and wait_event_type = 'Lock'"
            ).fetchone()
            if waiting == (1,):
                break
            assert not running.done(), running.result()
            assert time.monotonic() < deadline, "the cycle never reached the held Attempt"
            time.sleep(0.01)
        assert statuses(observer, order) == ["cancelled"] * 6 + ["queued"] * 4
        holder.rollback()
        running.result(timeout=30)
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        assert statuses(conn, order) == ["cancelled"] * 10
        for run in claimed:
            assert event_types(conn, run) == [
                "run.queued",
                "run.cancel_requested",
                "attempt.cancelled",
                "run.cancelled",
            ]
        assert stream_faults(conn) == []
        assert duplicate_events(conn) == (0, 0)


def test_one_cycle_also_recovers_an_expired_claim_and_requeues_a_due_retry(database: Database) -> None:
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        project = make_project(conn)
        cancelled = make_runs(conn, make_revision(conn, project, {"argv": ["true"]}), 4)
        claim_run = make_runs(conn, make_revision(conn, project, {"argv": ["true"], "pool": "claim"}), 1)[0]
        retry_plan = {"argv": ["false"], "maxAttempts": 2, "retryBackoffMs": 0, "pool": "retry"}
        retry_run = make_runs(conn, make_revision(conn, project, retry_plan), 1)[0]
        claim_worker, retry_worker = make_worker(conn, "claim"), make_worker(conn, "retry")
    with (
        psycopg.connect(database.runtime_dsn, autocommit=True) as rt,
        psycopg.connect(database.dsn()) as admin,
    ):
        claimer = open_session(rt, claim_worker, 2)
        claim = pull(rt, claimer)
        retrier = open_session(rt, retry_worker, 2)
        failing = pull(rt, retrier)
        for phase in ("starting", "running"):
            assert activate(rt, retrier, failing, phase)["status"] == "applied"
        done = complete(rt, retrier, failing, lease_version(admin, failing), 1)
        admin.rollback()
        assert (done["status"], done["runStatus"]) == ("completed", "retry_wait"), done
    assert (claim.run_id, failing.run_id) == (claim_run, retry_run)
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        conn.execute(
            "update ql.run_leases set expires_at_ms = ql.now_ms() - 60000 where attempt_id = %s",
            (claim.attempt_id,),
        )
        cancel_in_order(conn, cancelled)

    with psycopg.connect(database.dsn("ql_scheduler"), autocommit=True) as scheduler:
        converge(scheduler, 3, 64, 30000)

    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        assert statuses(conn, cancelled) == ["cancelled"] * 4
        assert event_types(conn, claim_run) == ["run.queued", "attempt.abandoned"]
        assert event_types(conn, retry_run) == [
            "run.queued",
            "attempt.starting",
            "attempt.failed",
            "run.retry_scheduled",
            "run.requeued",
        ]
        rows = conn.execute(
            "select r.id, r.status, r.current_attempt_id, r.retry_at_ms, r.cancel_requested_at_ms, a.status"
            " from ql.runs r join ql.run_attempts a on a.run_id = r.id where r.id = any(%s)",
            ([claim_run, retry_run],),
        ).fetchall()
        assert sorted(rows, key=lambda r: r[0] != claim_run) == [
            (claim_run, "queued", None, None, None, "abandoned"),
            (retry_run, "queued", None, None, None, "failed"),
        ]
        assert stream_faults(conn) == []
        assert duplicate_events(conn) == (0, 0)
    # Both Runs are offerable again, as their second Attempt.
    with psycopg.connect(database.runtime_dsn, autocommit=True) as rt:
        again = pull(rt, claimer), pull(rt, retrier)
    assert [(o.run_id, o.raw["attemptNo"]) for o in again] == [(claim_run, 2), (retry_run, 2)]


@pytest.mark.parametrize(
    ("page_size", "max_pages", "grace_ms"),
    [
        (0, 16, 30000),
        (129, 16, 30000),
        (None, 16, 30000),
        (64, 0, 30000),
        (64, 65, 30000),
        (64, None, 30000),
        (64, 16, -1),
        (64, 16, 86400001),
        (64, 16, None),
    ],
)
def test_out_of_range_bounds_raise_22023(
    database: Database, page_size: int | None, max_pages: int | None, grace_ms: int | None
) -> None:
    runs = cancelled_queued_runs(database, 1)
    with (
        psycopg.connect(database.dsn("ql_scheduler"), autocommit=True) as scheduler,
        pytest.raises(psycopg.errors.InvalidParameterValue, match="bounds out of range"),
    ):
        converge(scheduler, page_size, max_pages, grace_ms)
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        assert statuses(conn, runs) == ["queued"]


@pytest.mark.parametrize(("stop_grace_ms", "grace_ms"), [(5000, 5999), (5000, 0), (60000, 60999)])
def test_a_grace_below_the_workers_stop_grace_raises_22023_and_changes_nothing(
    database: Database, stop_grace_ms: int, grace_ms: int
) -> None:
    """A task may still run until its Lease expiry + the runner's 1 s poll + the Workers' stop grace: a shorter grace
    would declare its Run lost and retry it elsewhere meanwhile. Refused before any page, so the cancel waits."""
    runs = cancelled_queued_runs(database, 1)
    refusal = f"grace_ms {grace_ms} is below its floor {stop_grace_ms + 1000} "
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        conn.execute("update ql.settings set worker_stop_grace_ms = %s", (stop_grace_ms,))
        try:
            with (
                psycopg.connect(database.dsn("ql_scheduler"), autocommit=True) as scheduler,
                pytest.raises(psycopg.errors.InvalidParameterValue, match=refusal),
            ):
                converge(scheduler, 64, 16, grace_ms)
            assert statuses(conn, runs) == ["queued"]
        finally:
            conn.execute("update ql.settings set worker_stop_grace_ms = default")


def test_call_inside_an_explicit_transaction_fails_and_changes_nothing(database: Database) -> None:
    runs = cancelled_queued_runs(database, 2)
    with (
        psycopg.connect(database.dsn("ql_scheduler"), autocommit=True) as scheduler,
        pytest.raises(psycopg.errors.InvalidTransactionTermination),
        scheduler.transaction(),
    ):
        converge(scheduler, 1, 4, 6000)
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        # The first page ran before its COMMIT failed; the whole transaction rolled back.
        assert statuses(conn, runs) == ["queued", "queued"]


def test_runtime_role_cannot_call_converge_or_its_pages(database: Database) -> None:
    runs = cancelled_queued_runs(database, 1)
    with psycopg.connect(database.runtime_dsn, autocommit=True) as rt:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            converge(rt, 3, 1, 0)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            call(rt, "ql_api.run_cancellation_converge_v1(%s)", (3,))
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            call(rt, "ql_api.lease_expiry_reconcile_v1(%s, %s)", (3, 0))
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        assert statuses(conn, runs) == ["queued"]
        # The one SECURITY INVOKER routine, without a SET clause (else its COMMITs would fail).
        row = conn.execute(
            "select prosecdef, proconfig from pg_proc"
            " where oid = 'ql_api.converge(integer, integer, bigint)'::regprocedure"
        ).fetchone()
        assert row == (False, None)
