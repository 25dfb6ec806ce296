"""Writes go on for a year after partition maintenance stopped (before, partitions ran out after two months without
the daily job, and then every admission, enqueue, pull, ACK, completion and timeout intent failed with SQLSTATE
23514). A real PostgreSQL whose clock libfaketime moves (tests/support/clock.py): the database is deployed at
today's date and nothing maintains it; at +365 days the whole lifecycle of a Run and an audit row are written; at
+500 days, past the 13 months of partitions, a write fails with 23514 'no partition of relation' (what the shell
answers as storage.partition_missing), and one convergence cycle, which creates partitions ahead, makes writes work
again. Touches: a cluster of its own (tests/support/clock.py).
"""

from __future__ import annotations

import psycopg
import pytest

from tests.support.clock import DAY_MS, converge, faked_clock, lifecycle

pytestmark = pytest.mark.db


def test_writes_go_on_a_year_after_maintenance_stopped() -> None:
    with faked_clock() as clock:
        clock.move(365)
        lifecycle(clock)
        with psycopg.connect(clock.dsn(), autocommit=True) as admin:
            row = admin.execute(
                "select count(*) from ql.run_events where occurred_at_ms > ql.now_ms() - %s", (DAY_MS,)
            ).fetchone()
        assert row is not None and row[0] == 4  # run.queued, attempt.starting, attempt.succeeded, run.succeeded

        clock.move(500)
        with pytest.raises(psycopg.errors.CheckViolation, match="no partition of relation"):
            lifecycle(clock)
        converge(clock)
        lifecycle(clock)
