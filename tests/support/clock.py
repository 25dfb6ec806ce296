"""A PostgreSQL whose clock libfaketime moves ahead (LD_PRELOAD on the server alone, an offset file it re-reads every
second), a database deployed there by sqitch at today's date, and the writes of one whole Run lifecycle: what
tests/integration/test_partitions_ahead.py and bench part (k) use to show that writes go on while nothing maintains
the partitions. Touches: a temporary folder under /tmp (removed), the cluster's processes, its one database.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import psycopg

from qinglong.devdb import Cluster
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
from tests.support.env import start_and_deploy

LIBFAKETIME: Final = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
DAY_MS: Final = 86_400_000
DATABASE: Final = "qinglong"


@dataclass
class FakedClock:
    cluster: Cluster
    offset: Path

    def dsn(self, user: str = "postgres") -> str:
        return self.cluster.dsn(DATABASE).replace("user=postgres", f"user={user}")

    def move(self, days: int) -> None:
        """The database clock `days` ahead of the real one (waits until ql.now_ms() says so)."""
        self.offset.write_text(f"+{days}d\n")
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            for _ in range(100):
                row = conn.execute("select ql.now_ms() - %s", (int(time.time() * 1000),)).fetchone()
                assert row is not None
                if abs(row[0] - days * DAY_MS) < DAY_MS:
                    return
                time.sleep(0.1)
        raise AssertionError(f"the database clock did not move {days} days")


@contextlib.contextmanager
def faked_clock(fsync: bool = False) -> Iterator[FakedClock]:
    """A cluster under libfaketime ("+0d" at first) with the schema deployed into database `qinglong`; nothing
    maintains it (pg_cron, preloaded, serves the `postgres` database)."""
    assert LIBFAKETIME.exists(), "scripts/setup.sh installs libfaketime"
    root = Path(tempfile.mkdtemp(prefix="ql-faketime-", dir="/tmp"))
    root.chmod(0o755)
    offset = root / "offset"
    offset.write_text("+0d\n")
    offset.chmod(0o644)
    server_env = {
        "LD_PRELOAD": str(LIBFAKETIME),
        "FAKETIME_TIMESTAMP_FILE": str(offset),
        "FAKETIME_CACHE_DURATION": "1",
    }
    cluster = Cluster(root / "pg", fsync=fsync, server_env=server_env)
    try:
        start_and_deploy(cluster, DATABASE)
        yield FakedClock(cluster, offset)
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def lifecycle(clock: FakedClock) -> None:
    """A Run queued, pulled, started, running and completed, and one audit row: every kind of event and audit write.
    Raises what the database raised (psycopg.errors.CheckViolation when no partition holds now)."""
    with (
        psycopg.connect(clock.dsn(), autocommit=True) as admin,
        psycopg.connect(clock.dsn("ql_runtime"), autocommit=True) as rt,
    ):
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


def converge(clock: FakedClock) -> None:
    """One convergence cycle, as pg_cron would run it (it creates the partitions ahead)."""
    with psycopg.connect(clock.dsn("ql_scheduler"), autocommit=True) as conn:
        conn.execute("call ql_api.converge()")
