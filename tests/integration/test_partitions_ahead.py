"""Writes go on for a year after partition maintenance stopped (before, partitions ran out after two months without
the daily job, and then every admission, enqueue, pull, ACK, completion and timeout intent failed with SQLSTATE
23514). A real PostgreSQL whose clock libfaketime moves (LD_PRELOAD, an offset file it re-reads every second): the
database is deployed at today's date and nothing maintains it (pg_cron serves another database here); at +365 days
the whole lifecycle of a Run and an audit row are written; at +500 days, past the 13 months of partitions, a write
fails with 23514 'no partition of relation' (what the shell answers as storage.partition_missing), and one
convergence cycle, which creates partitions ahead, makes writes work again.
Touches: a cluster of its own (started under libfaketime), one database deployed by sqitch.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import psycopg
import pytest

from qinglong.devdb import Cluster
from tests.conftest import Database, fresh_database
from tests.integration.db.factories import (
    activate,
    complete,
    lease_version,
    make_project,
    make_revision,
    make_runs,
    make_worker,
    open_session,
    pull,
)

pytestmark = pytest.mark.db

LIBFAKETIME: Final = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
DAY_MS: Final = 86_400_000


@pytest.fixture
def faked() -> Iterator[tuple[Cluster, Path]]:
    """A cluster whose clock is today's plus the offset written in the returned file ("+0d" at first)."""
    assert LIBFAKETIME.exists(), "scripts/setup.sh installs libfaketime"
    root = Path(tempfile.mkdtemp(prefix="ql-test-faketime-", dir="/tmp"))
    root.chmod(0o755)
    offset = root / "offset"
    offset.write_text("+0d\n")
    offset.chmod(0o644)
    server_env = {
        "LD_PRELOAD": str(LIBFAKETIME),
        "FAKETIME_TIMESTAMP_FILE": str(offset),
        "FAKETIME_CACHE_DURATION": "1",
    }
    cluster = Cluster(root / "pg", fsync=False, server_env=server_env)
    cluster.start()
    try:
        yield cluster, offset
    finally:
        cluster.stop()


def move_clock(admin: psycopg.Connection[Any], offset: Path, days: int) -> None:
    real_ms = time.time() * 1000
    offset.write_text(f"+{days}d\n")
    for _ in range(100):
        row = admin.execute("select ql.now_ms()").fetchone()
        assert row is not None
        if abs(row[0] - real_ms - days * DAY_MS) < DAY_MS:
            return
        time.sleep(0.1)
    raise AssertionError(f"the database clock did not move {days} days")


def lifecycle(database: Database, admin: psycopg.Connection[Any]) -> None:
    """A Run queued, pulled, started, running and completed, and one audit row: every kind of event write."""
    with psycopg.connect(database.runtime_dsn, autocommit=True) as rt:
        make_runs(admin, make_revision(admin, make_project(admin), {"argv": ["true"]}), 1)
        worker = open_session(rt, make_worker(admin), 1)
        offer = pull(rt, worker)
        assert activate(rt, worker, offer, "starting")["status"] == "applied"
        assert activate(rt, worker, offer, "running")["status"] == "applied"
        assert complete(rt, worker, offer, lease_version(admin, offer), 0)["status"] == "completed"
    admin.execute(
        "insert into ql.security_audit (at_ms, route, decision, reason, request_id)"
        " values (ql.now_ms(), 'test', 'allow', 'ok', 'later')"
    )


def test_writes_go_on_a_year_after_maintenance_stopped(faked: tuple[Cluster, Path]) -> None:
    cluster, offset = faked
    with (
        fresh_database(cluster, deploy_to="@HEAD") as database,
        psycopg.connect(database.dsn(), autocommit=True) as admin,
    ):
        move_clock(admin, offset, 365)
        lifecycle(database, admin)
        row = admin.execute(
            "select count(*) from ql.run_events where occurred_at_ms > ql.now_ms() - %s", (DAY_MS,)
        ).fetchone()
        assert row is not None and row[0] >= 5  # queued, claimed, starting, running, succeeded…

        move_clock(admin, offset, 500)
        with pytest.raises(psycopg.errors.CheckViolation, match="no partition of relation"):
            lifecycle(database, admin)
        admin.execute("call ql_api.converge()")
        lifecycle(database, admin)
