"""Upgrading a live database that holds rows to the partitioned run_events and security_audit (ql/retention,
docs/decisions/0009-retention.md) and back: on a database deployed `--to @v0.1.0` with Runs, their events and
audit rows (one of each from 1970), a writer appends events to a Run and audit rows on one long-lived connection
while `sqitch deploy` runs to HEAD. The writer only waits (no error), every row written before or during the
deploy is in the partitioned tables (the 1970 ones in the history partition), each Run's sequence stays
contiguous, a duplicate dedupe key is still refused, and the daily cycle (`CALL ql_api.retain()` as ql_scheduler)
runs. `sqitch revert --to @v0.1.0` brings back the
unpartitioned tables with their global unique keys and every row.

Touches: one database of the session cluster (created here, deployed to @v0.1.0, dropped), its sqitch processes.
"""

from __future__ import annotations

import subprocess
import threading
import uuid
from collections.abc import Iterator
from typing import Any, Final

import psycopg
import pytest

from qinglong import db
from qinglong.devdb import Cluster
from tests.conftest import fresh_database

pytestmark = pytest.mark.db

RELEASE: Final = "@v0.1.0"
FIXED_EXECUTOR: Final = "00000000-0000-4000-8000-000000000001"


@pytest.fixture
def released(cluster: Cluster) -> Iterator[str]:
    with fresh_database(cluster, deploy_to=RELEASE) as made:
        yield made.name


def sqitch(cluster: Cluster, name: str, *args: str) -> None:
    argv = db.sqitch(*args, cluster.sqitch_target(name))
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def one(conn: psycopg.Connection[Any], sql: str, args: tuple[Any, ...] = ()) -> Any:
    row = conn.execute(sql, args).fetchone()
    assert row is not None, sql
    return row[0]


def seed(conn: psycopg.Connection[Any], runs: int) -> list[uuid.UUID]:
    """Queued Runs with three events each (the first Run's last one of 1970) and two audit rows."""
    project = one(conn, "insert into ql.projects (name) values ('retention') returning id")
    task = one(conn, "insert into ql.tasks (project_id, name) values (%s, 't') returning id", (project,))
    rev = one(
        conn,
        "insert into ql.task_execution_revisions (task_id, project_id, plan_json, executor_revision_id)"
        ' values (%s, %s, \'{"argv": ["true"]}\', %s) returning id',
        (task, project, FIXED_EXECUTOR),
    )
    ids = []
    for i in range(runs):
        run = one(
            conn,
            "insert into ql.runs (project_id, task_id, task_revision_id, pool, status, queued_at_ms, created_at_ms)"
            " values (%s, %s, %s, 'default', 'created', ql.now_ms(), ql.now_ms()) returning id",
            (project, task, rev),
        )
        for n, at in ((1, "ql.now_ms()"), (2, "ql.now_ms()"), (3, "1000" if i == 0 else "ql.now_ms()")):
            conn.execute(
                f"select ql.run_event(%s, null, 'run.noted', 'system', null, null, '{{}}', {at}, %s)",
                (run, f"seed-{n}:{run}"),
            )
        ids.append(run)
    conn.execute(
        "insert into ql.security_audit (at_ms, route, decision, reason, request_id)"
        " values (1000, 'old', 'allow', 'ok', 'r0'), (ql.now_ms(), 'now', 'allow', 'ok', 'r1')"
    )
    return ids


def rows(conn: psycopg.Connection[Any]) -> tuple[set[tuple[Any, ...]], set[tuple[Any, ...]]]:
    events = conn.execute("select run_id, sequence, event_id, dedupe_key, occurred_at_ms from ql.run_events")
    audit = conn.execute("select id, at_ms, route, request_id from ql.security_audit")
    return set(events.fetchall()), set(audit.fetchall())


def test_partitioning_migrates_rows_under_live_writes_and_reverts(cluster: Cluster, released: str) -> None:
    dsn = cluster.dsn(released)
    with psycopg.connect(dsn, autocommit=True) as conn:
        runs = seed(conn, 50)
        events0, audit0 = rows(conn)
    assert len(events0) == 150

    stop = threading.Event()
    written: list[str] = []
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                while not stop.is_set():
                    key = f"live-{len(written)}"
                    conn.execute(
                        "select ql.run_event(%s, null, 'run.noted', 'system', null, null, '{}', ql.now_ms(), %s)",
                        (runs[1], key),
                    )
                    conn.execute(
                        "insert into ql.security_audit (at_ms, route, decision, reason, request_id)"
                        " values (ql.now_ms(), 'live', 'allow', 'ok', %s)",
                        (key,),
                    )
                    written.append(key)
        except BaseException as e:  # reported by the assertion below
            errors.append(e)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        sqitch(cluster, released, "deploy")
        before = len(written)
        while len(written) < before + 5 and thread.is_alive():  # it goes on writing after the deploy
            stop.wait(0.05)
    finally:
        stop.set()
        thread.join(30)
    assert errors == []
    assert len(written) > 5
    sqitch(cluster, released, "verify")

    with psycopg.connect(dsn, autocommit=True) as conn:
        assert one(conn, "select relkind::text from pg_class where oid = 'ql.run_events'::regclass") == "p"
        assert one(conn, "select relkind::text from pg_class where oid = 'ql.security_audit'::regclass") == "p"
        events1, audit1 = rows(conn)
        assert events0 <= events1 and audit0 <= audit1
        assert len(events1) == 150 + len(written) and len(audit1) == 2 + len(written)
        assert one(conn, "select tableoid::regclass::text from ql.run_events where occurred_at_ms = 1000") == (
            "ql.run_events_phistory"
        )
        assert one(conn, "select tableoid::regclass::text from ql.security_audit where at_ms = 1000") == (
            "ql.security_audit_phistory"
        )
        gaps = one(
            conn,
            "select count(*) from ql.runs r where r.event_sequence <> (select count(*) from ql.run_events e"
            " where e.run_id = r.id) or r.event_sequence <> (select max(e.sequence) from ql.run_events e"
            " where e.run_id = r.id)",
        )
        assert gaps == 0
        with pytest.raises(psycopg.errors.UniqueViolation, match="run_events_dedupe_key_key"):
            conn.execute(
                "select ql.run_event(%s, null, 'run.noted', 'system', null, null, '{}', ql.now_ms(), %s)",
                (runs[0], f"seed-1:{runs[0]}"),
            )

        # The daily cycle runs as pg_cron runs it: as ql_scheduler, outside a transaction block.
        conn.execute("set role ql_scheduler")
        conn.execute("call ql_api.retain()")
        conn.execute("reset role")
        assert rows(conn) == (events1, audit1)  # nothing is past retention

    sqitch(cluster, released, "revert", "-y", "--to", RELEASE)
    sqitch(cluster, released, "verify")
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert one(conn, "select relkind::text from pg_class where oid = 'ql.run_events'::regclass") == "r"
        assert one(conn, "select to_regclass('ql.run_events_event_id_key') is not null") is True
        assert rows(conn) == (events1, audit1)
