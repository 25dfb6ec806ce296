"""The rows each call of a Run lifecycle writes, table by table (pg_stat_xact_user_tables of the call's own
transaction): pull → starting → running → renewal → completion (failed, a retry), then the pull of that due
retry. Pinned: at most one `runs` update per call (two for the pull of a due retry: its requeue, then the
claim); the claim a HOT update (no index of ql.runs names current_attempt_id) and no event; the running ACK a
write of its Attempt only; the ACKs' Attempt writes and the renewal HOT updates (no index of ql.run_attempts or
ql.run_leases names a column they write; a renewal writes its Lease only), so each costs no index entry; the
event stream stays contiguous.
Touches: one fresh database (fixture rows as the deployer; the calls as ql_runtime in the same session).
"""

from __future__ import annotations

from typing import Any, Final

import psycopg
import pytest

from tests.conftest import Database
from tests.integration.db.factories import (
    Offer,
    WorkerHandle,
    activate,
    complete,
    digest,
    make_project,
    make_revision,
    make_runs,
    make_worker,
    open_session,
)

pytestmark = pytest.mark.db

Writes = dict[str, tuple[int, int, int]]  # table → (inserted, updated, of them HOT)


def writes(conn: psycopg.Connection[Any], query: str, args: tuple[Any, ...]) -> tuple[dict[str, Any], Writes]:
    """`query` as ql_runtime in a transaction of its own, its answer and what that transaction wrote (the
    backend's counters not yet flushed, after less before: they hold earlier transactions' counts too; the
    monthly partitions of run_events count as run_events)."""

    def counts() -> dict[str, tuple[int, int, int]]:
        rows = conn.execute(
            "select case when relname like 'run\\_events%%' then 'run_events' else relname end,"
            "  sum(n_tup_ins)::int, sum(n_tup_upd)::int, sum(n_tup_hot_upd)::int from pg_stat_xact_user_tables"
            " where schemaname = 'ql' group by 1"
        ).fetchall()
        return {name: (ins, upd, hot) for name, ins, upd, hot in rows}

    with conn.transaction():
        before = counts()
        conn.execute("set local role ql_runtime")
        row = conn.execute(query, args).fetchone()
        conn.execute("reset role")
        after = counts()
    assert row is not None
    delta = {
        name: tuple(a - b for a, b in zip(after[name], before.get(name, (0, 0, 0)), strict=True)) for name in after
    }
    return row[0], {name: (ins, upd, hot) for name, (ins, upd, hot) in delta.items() if ins or upd}


PULL: Final = "select ql_api.offer_pull_v1(%s, %s, %s, %s)"
ACTIVATE: Final = "select ql_api.attempt_activation_v1(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, null)"
RENEW: Final = "select ql_api.attempt_lease_control_v1(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
COMPLETE: Final = "select ql_api.attempt_complete_v1(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, null, '[]')"


@pytest.fixture
def worker(database: Database) -> tuple[psycopg.Connection[Any], WorkerHandle]:
    conn = psycopg.connect(database.dsn(), autocommit=True)
    revision = make_revision(conn, make_project(conn), {"argv": ["true"], "maxAttempts": 2, "retryBackoffMs": 0})
    make_runs(conn, revision, 1)
    with psycopg.connect(database.runtime_dsn, autocommit=True) as rt:
        handle = open_session(rt, make_worker(conn), 1)
    return conn, handle


def test_each_call_of_a_lifecycle_writes_its_run_once_and_its_acks_and_renewals_are_hot(
    worker: tuple[psycopg.Connection[Any], WorkerHandle],
) -> None:
    conn, w = worker
    with conn:
        raw = "raw-token-writes-1"
        pulled, wrote = writes(conn, PULL, (*w.head, digest(raw)))
        assert pulled["status"] == "offered", pulled
        o = Offer(pulled["offer"], raw)
        # The claim: a HOT update of the Run (no index of ql.runs names current_attempt_id), and no event.
        assert wrote == {"runs": (0, 1, 1), "run_attempts": (1, 0, 0), "run_leases": (1, 0, 0)}, wrote
        for phase in ("starting", "running"):
            acked, wrote = writes(conn, ACTIVATE, (phase, *w.head, *o.fence))
            assert acked["status"] == "applied", acked
            assert wrote["run_attempts"] == (0, 1, 1), (phase, wrote)
            assert wrote == (
                {"runs": (0, 1, 0), "run_attempts": (0, 1, 1), "run_events": (1, 0, 0)}  # the Run's status moves
                if phase == "starting" else {"run_attempts": (0, 1, 1)}  # running: the Attempt only, no event
            ), phase  # fmt: skip
        renewed, wrote = writes(conn, RENEW, (*w.head, *o.fence, acked["snapshot"]["leaseVersion"]))
        assert renewed["status"] == "renewed", renewed
        assert wrote == {"run_leases": (0, 1, 1)}, "a renewal writes its Lease only"
        done, wrote = writes(conn, COMPLETE, (*w.head, *o.fence, renewed["leaseVersion"], 1))
        assert (done["runStatus"], done["attemptStatus"]) == ("retry_wait", "failed"), done
        assert wrote == {"runs": (0, 1, 0), "run_attempts": (0, 1, 0), "run_events": (2, 0, 0)}

        # The due retry: requeued (one update, ql.run_requeue) by the pull that claims it (one more).
        raw = "raw-token-writes-2"
        pulled, wrote = writes(conn, PULL, (*w.head, digest(raw)))
        assert pulled["status"] == "offered" and pulled["offer"]["attemptNo"] == 2, pulled
        assert wrote == {
            "runs": (0, 2, 1), "run_attempts": (1, 0, 0), "run_leases": (1, 0, 0), "run_events": (1, 0, 0),
        }, "run.requeued is the pull's one event"  # fmt: skip
        o = Offer(pulled["offer"], raw)
        assert activate(conn, w, o, "starting")["status"] == "applied"
        done = complete(conn, w, o, 1, 0)
        assert done["runStatus"] == "succeeded", done
        events = conn.execute(
            "select sequence, type from ql.run_events where run_id = %s order by sequence", (o.run_id,)
        ).fetchall()
    assert [t for _, t in events] == [
        "run.queued", "attempt.starting", "attempt.failed", "run.retry_scheduled", "run.requeued",
        "attempt.starting", "attempt.succeeded", "run.succeeded",
    ]  # fmt: skip
    assert [s for s, _ in events] == list(range(1, 9))
