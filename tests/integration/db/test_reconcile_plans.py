"""The retry step of ql_api.lease_expiry_reconcile_v1 over 100,000 Runs waiting for a retry that is not yet due:
its scan is a range of ql.runs_retry_due_idx bounded by database time (an index condition, not a filter per row),
so a cycle with nothing due reads a handful of buffers, not the waiting Runs; and it still takes, in order, every
lost Run and every due retry among them (a cycle after another, so also through PL/pgSQL's cached generic plan).
The plan is the function's own statement as PostgreSQL ran it (auto_explain answers nested plans as notices).
Touches: one fresh database (writes Runs as the deployer would; reads plans).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import psycopg
import pytest

from tests.conftest import Database
from tests.integration.db.factories import call, make_project, make_revision
from tests.integration.db.plans import buffers, explaining, nodes

pytestmark = pytest.mark.db

WAITING: Final = 100_000
SCAN: Final = "select * from ql.runs r where r.cancel_requested_at_ms is null"


@pytest.fixture
def waiting(database: Database) -> dict[str, Any]:
    """WAITING retry_wait Runs due in an hour, analysed and vacuumed as a live table would be."""
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        revision = make_revision(
            conn,
            make_project(conn, "reconcile-plans"),
            {"argv": ["true"], "pool": "wait", "maxAttempts": 2, "retryBackoffMs": 7200000},
        )
        conn.execute(
            "insert into ql.runs (project_id, task_id, task_revision_id, pool, status, queued_at_ms, created_at_ms,"
            "                     retry_at_ms)"
            " select t.project_id, t.task_id, t.id, 'wait', 'retry_wait', ql.now_ms(), ql.now_ms(),"
            "        ql.now_ms() + 3600000 + g"
            "   from generate_series(1, %s) g join ql.task_execution_revisions t on t.id = %s",
            (WAITING, revision),
        )
        conn.execute("vacuum (analyze) ql.runs")
        pages = conn.execute("select relpages from pg_class where oid = 'ql.runs'::regclass").fetchone()
    assert pages is not None and pages[0] > 1000
    return {"revision": revision, "pages": pages[0]}


@pytest.fixture
def explained(database: Database) -> Iterator[tuple[psycopg.Connection[Any], list[dict[str, Any]]]]:
    conn, plans = explaining(database.dsn(), "ql_scheduler")
    with conn:
        yield conn, plans


def retry_scan(plans: list[dict[str, Any]]) -> dict[str, Any]:
    found = [p for p in plans if " ".join(p["Query Text"].split()).startswith(SCAN)]
    assert len(found) == 1, [p["Query Text"][:80] for p in plans]
    runs = [n for n in nodes(found[0]["Plan"]) if n.get("Relation Name") == "runs"]
    assert [(n["Node Type"], n.get("Index Name")) for n in runs] == [("Index Scan", "runs_retry_due_idx")], found[0]
    assert "<=" in runs[0].get("Index Cond", ""), runs[0]  # the due bound is where the range ends, not a filter
    return found[0]


def test_nothing_due_reads_a_bounded_number_of_buffers_whatever_waits(
    database: Database, waiting: dict[str, Any], explained: tuple[psycopg.Connection[Any], list[dict[str, Any]]]
) -> None:
    conn, plans = explained
    for cycle in range(8):  # custom plans first, then PL/pgSQL's generic one
        plans.clear()
        assert call(conn, "ql_api.lease_expiry_reconcile_v1(%s, %s)", (128, 0)) == {
            "status": "ok", "scanned": 0, "abandoned": 0, "lost": 0, "retryScheduled": 0, "failed": 0, "requeued": 0,
        }  # fmt: skip
        assert buffers(retry_scan(plans)["Plan"]) <= 4 < waiting["pages"] // 100, (cycle, waiting["pages"])
    with psycopg.connect(database.dsn()) as check:
        row = check.execute("select count(*) from ql.runs where status = 'retry_wait'").fetchone()
    assert row == (WAITING,), "nothing changed"


def test_lost_runs_and_due_retries_are_taken_in_order_among_the_waiting(
    database: Database, waiting: dict[str, Any], explained: tuple[psycopg.Connection[Any], list[dict[str, Any]]]
) -> None:
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        rows = conn.execute(
            "insert into ql.runs (project_id, task_id, task_revision_id, pool, status, queued_at_ms, created_at_ms,"
            "                     retry_at_ms)"
            " select t.project_id, t.task_id, t.id, 'wait', s.status, ql.now_ms(), ql.now_ms(), s.retry_at"
            "   from ql.task_execution_revisions t cross join (values"
            "     ('lost'::ql.run_status, null::bigint), ('lost', null),"
            "     ('retry_wait', ql.now_ms() - 2000), ('retry_wait', ql.now_ms() - 1000)) s (status, retry_at)"
            "  where t.id = %s returning id, status",
            (waiting["revision"],),
        ).fetchall()
    conn, plans = explained
    first = call(conn, "ql_api.lease_expiry_reconcile_v1(%s, %s)", (3, 0))
    assert (first["scanned"], first["retryScheduled"], first["requeued"]) == (3, 2, 1), first
    assert buffers(retry_scan(plans)["Plan"]) <= 12, "three Runs and their index entries"
    plans.clear()
    second = call(conn, "ql_api.lease_expiry_reconcile_v1(%s, %s)", (3, 0))
    assert (second["scanned"], second["retryScheduled"], second["requeued"]) == (1, 0, 1), second
    assert buffers(retry_scan(plans)["Plan"]) <= 8
    with psycopg.connect(database.dsn()) as check:
        moved = check.execute(
            "select r.id, r.status, e.type from ql.runs r join ql.run_events e on e.run_id = r.id"
            " where r.id = any(%s) order by r.id",
            ([r[0] for r in rows],),
        ).fetchall()
        waiting_now = check.execute("select count(*) from ql.runs where status = 'retry_wait'").fetchone()
    lost = {r[0] for r in rows if r[1] == "lost"}
    assert sorted((str(i), s, t) for i, s, t in moved) == sorted(
        [(str(i), "retry_wait", "run.retry_scheduled") for i in lost]
        + [(str(i), "queued", "run.requeued") for i, s in rows if s == "retry_wait"]
    )
    assert waiting_now == (WAITING + 2,), "the lost Runs wait now; none of the others moved"
