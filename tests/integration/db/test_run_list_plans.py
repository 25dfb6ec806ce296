"""The plans of the run history and of the pull, over a few thousand Runs: every filter combination of
ql_api.run_list_v1 (task, status, since, until, each with and without a cursor) reads its page through its
own index with no sequential scan of ql.runs and a bounded number of buffers, and ql_api.offer_pull_v1
offers the due retries and the queued Runs of its pool in the order each became offerable, finding each
among thousands of retries not yet due (and thousands of queued Runs of another pool) with one probe of
ql.runs_retry_offerable_idx and one of ql.runs_offerable_idx, a handful of buffers each, pull after pull
(so after PL/pgSQL switched to its cached generic plans too). The plans are those of the functions' own
statements, as PostgreSQL ran them (auto_explain, loaded into the test's session, answers each nested
statement's plan as a notice), not of copies of their text.
Touches: one fresh database (writes Runs as the deployer would; reads plans).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from typing import Any, Final

import psycopg
import pytest

from tests.conftest import Database
from tests.integration.db.factories import call, digest, make_project, make_revision, make_worker, open_session
from tests.integration.db.plans import buffers, explaining, nodes

pytestmark = pytest.mark.db

RUNS_P: Final = 4000  # P's history: 3 tasks, every status
LIMIT: Final = 20
HISTORY_INDEXES: Final = {  # (task filter, status filter): the index; no status filter merges the statuses found
    (False, False): "runs_history_status_idx",
    (True, False): "runs_history_task_status_idx",
    (False, True): "runs_history_status_idx",
    (True, True): "runs_history_task_status_idx",
}
STATUSES: Final = ("queued", "running", "succeeded", "failed", "cancelled", "timed_out", "retry_wait", "lost")


@pytest.fixture
def seeded(database: Database) -> dict[str, Any]:
    """P: RUNS_P Runs of 3 tasks in every status, created 10 ms apart (runs of the same millisecond too); Q: 1000
    Runs; pool offer-pool: 2000 retries due in an hour, 8 due a second ago, 4 queued 5 s ago and 4 queued now;
    pool busy: 2000 queued Runs. Vacuumed and analysed, as a live table would be."""
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        p, q = make_project(conn, "plans-p"), make_project(conn, "plans-q")
        revisions_p = [make_revision(conn, p, {"argv": ["true"], "pool": "hist"}) for _ in range(3)]
        revision_q = make_revision(conn, q, {"argv": ["true"], "pool": "hist"})
        revision_offer = make_revision(conn, q, {"argv": ["true"], "pool": "offer-pool"})
        revision_busy = make_revision(conn, q, {"argv": ["true"], "pool": "busy"})
        insert = """
            insert into ql.runs (project_id, task_id, task_revision_id, pool, status, queued_at_ms, created_at_ms,
                                 ended_at_ms, retry_at_ms)
            select t.project_id, t.task_id, t.id, t.plan_json ->> 'pool', s.status, ql.now_ms() - 10000000 + g,
                   ql.now_ms() - 10000000 + (g / 2) * 10,
                   case when s.status in ('succeeded', 'failed', 'cancelled', 'timed_out') then ql.now_ms() end,
                   case when s.status = 'retry_wait' then ql.now_ms() + %(retry_in)s end
              from generate_series(1, %(count)s) g
              join ql.task_execution_revisions t on t.id = (%(revisions)s::uuid[])[1 + g %% %(n)s]
              cross join lateral (select (%(statuses)s::text[])[1 + (g / 3) %% %(m)s] as status) s
        """

        def runs(revisions: list[uuid.UUID], count: int, statuses: tuple[str, ...], retry_in: int = 3600000) -> None:
            conn.execute(
                insert,
                {
                    "revisions": revisions,
                    "count": count,
                    "n": len(revisions),
                    "statuses": list(statuses),
                    "m": len(statuses),
                    "retry_in": retry_in,
                },
            )

        runs(revisions_p, RUNS_P, STATUSES)
        runs([revision_q], 1000, STATUSES)
        runs([revision_offer], 2000, ("retry_wait",))
        runs([revision_busy], 2000, ("queued",))
        runs([revision_offer], 8, ("retry_wait",), retry_in=-1000)
        runs([revision_offer], 8, ("queued",))
        conn.execute("update ql.runs set queued_at_ms = ql.now_ms() where pool = 'offer-pool' and status = 'queued'")
        conn.execute(
            "update ql.runs set queued_at_ms = queued_at_ms - 5000 where id in (select id from ql.runs"
            " where pool = 'offer-pool' and status = 'queued' order by id limit 4)"
        )
        due = conn.execute(
            "select id, status from ql.runs where pool = 'offer-pool'"
            " and (status = 'queued' or retry_at_ms < ql.now_ms())"
            " order by case when status = 'retry_wait' then retry_at_ms else queued_at_ms end, id"
        ).fetchall()
        conn.execute("vacuum (analyze) ql.runs")
        pages = conn.execute("select relpages from pg_class where oid = 'ql.runs'::regclass").fetchone()
        tasks = conn.execute(
            "select task_id from ql.task_execution_revisions where id = any(%s::uuid[])", (revisions_p,)
        ).fetchall()
        worker = make_worker(conn, "offer-pool")
    assert len(due) == 16 and pages is not None
    assert [status for _, status in due] == ["queued"] * 4 + ["retry_wait"] * 8 + ["queued"] * 4
    return {"p": p, "q": q, "task": tasks[0][0], "pages": pages[0], "due": [str(r[0]) for r in due], "worker": worker}


@pytest.fixture
def explained(database: Database) -> Iterator[tuple[psycopg.Connection[Any], list[dict[str, Any]]]]:
    """A connection whose every statement, nested ones included, answers its executed plan as a notice (as
    the runtime role, after the superuser loaded auto_explain), and the plans so far."""
    conn, plans = explaining(database.dsn(), "ql_runtime")
    with conn:
        yield conn, plans


def statement(plans: list[dict[str, Any]], prefix: str) -> dict[str, Any]:
    found = [p for p in plans if " ".join(p["Query Text"].split()).startswith(prefix)]
    assert len(found) == 1, [p["Query Text"][:80] for p in plans]
    return found[0]


def assert_no_seq_scan_of_runs(plans: list[dict[str, Any]]) -> None:
    for plan in plans:
        for node in nodes(plan["Plan"]):
            assert not (node["Node Type"] == "Seq Scan" and node.get("Relation Name") == "runs"), plan["Query Text"]


@pytest.mark.parametrize(
    ("task", "status", "since", "until"), list(itertools.product((False, True), repeat=4)), ids=lambda b: "+-"[b]
)
def test_every_filter_combination_is_an_index_range_scan_with_bounded_buffers(
    task: bool,
    status: bool,
    since: bool,
    until: bool,
    seeded: dict[str, Any],
    explained: tuple[psycopg.Connection[Any], list[dict[str, Any]]],
) -> None:
    conn, plans = explained
    args = {
        "p_project_id": seeded["p"],
        "p_task_id": seeded["task"] if task else None,
        "p_status": "failed" if status else None,
        "p_since_ms": 0 if since else None,
        "p_until_ms": 2**53 - 1 if until else None,
        "p_limit": LIMIT,
    }

    def listed(cursor: str | None) -> dict[str, Any]:
        row = conn.execute(
            "select ql_api.run_list_v1(p_project_id => %(p_project_id)s, p_task_id => %(p_task_id)s,"
            " p_status => %(p_status)s, p_since_ms => %(p_since_ms)s, p_until_ms => %(p_until_ms)s,"
            " p_limit => %(p_limit)s, p_cursor => %(c)s)",
            {**args, "c": cursor},
        ).fetchone()
        assert row is not None
        result: dict[str, Any] = row[0]
        return result

    first = listed(None)
    assert first["status"] == "listed" and len(first["runs"]) == LIMIT and first["nextCursor"], first
    second = listed(first["nextCursor"])
    assert len(second["runs"]) == LIMIT, second
    if status:
        assert {r["status"] for r in first["runs"] + second["runs"]} == {"failed"}

    assert_no_seq_scan_of_runs(plans)
    keyset = [p for p in plans if p["Query Text"].startswith("select array(select u.id from (")]
    assert len(keyset) == 2, "one keyset statement per call"
    ranges = 1 if status else len(STATUSES)  # no status filter: one range per status, merged
    for plan, cursor in zip(keyset, (False, True), strict=True):
        scans = [n for n in nodes(plan["Plan"]) if n.get("Relation Name") == "runs"]
        assert len(scans) == ranges, plan
        assert ranges == 1 or any(n["Node Type"] == "Merge Append" for n in nodes(plan["Plan"])), plan
        for scan in scans:
            assert scan["Node Type"] in ("Index Only Scan", "Index Scan"), plan
            assert scan["Index Name"] == HISTORY_INDEXES[(task, status)], plan
            cond = scan["Index Cond"]
            assert "project_id =" in cond and ("task_id =" in cond) == task, cond
            assert "status =" in cond, cond
            assert ("created_at_ms >= " in cond) == since and ("created_at_ms < " in cond) == until, cond
            assert ("ROW(created_at_ms, id) <" in cond) == cursor, cond
            assert "Filter" not in scan, "every condition is an index condition: nothing is read to be thrown away"
        # Each range is read only as far as the merge needs: the page and one more, and one row ahead per range.
        assert LIMIT + 1 <= sum(scan["Actual Rows"] for scan in scans) <= LIMIT + ranges, plan
        # At most a heap page per row returned plus each range's descent, far below the table's pages.
        bound = LIMIT + 11 + 4 * (ranges - 1)
        assert buffers(plan["Plan"]) <= bound < seeded["pages"] // 3, (buffers(plan["Plan"]), seeded["pages"])
    if not status:  # the statuses found (ql.run_statuses): a skip scan, an index descent and a heap check each
        skips = [p for p in plans if "with recursive s (status)" in p["Query Text"]]
        assert len(skips) == 2, "one per call"
        for skip in skips:
            assert buffers(skip["Plan"]) <= 5 * (len(STATUSES) + 1), buffers(skip["Plan"])
    # The function's statements (its call's own total counts loading it into the session's caches): the page's
    # rows, tasks and Attempts, a few buffers a row, whatever the table holds.
    for plan in (p for p in plans if not p["Query Text"].startswith("select ql_api.")):
        assert buffers(plan["Plan"]) <= 10 * (LIMIT + 1), (plan["Query Text"][:60], buffers(plan["Plan"]))


def test_pulls_offer_due_retries_and_queued_runs_in_turn_each_through_its_index(
    seeded: dict[str, Any],
    explained: tuple[psycopg.Connection[Any], list[dict[str, Any]]],
) -> None:
    conn, plans = explained
    worker = open_session(conn, seeded["worker"], 17)
    offered: list[str] = []
    for n in range(16):
        plans.clear()
        pulled = call(conn, "ql_api.offer_pull_v1(%s, %s, %s, %s)", (*worker.head, digest(f"plan-token-{n}")))
        assert pulled["status"] == "offered", pulled
        offered.append(pulled["offer"]["runId"])
        assert_no_seq_scan_of_runs(plans)
        for prefix, index, bound in (
            ("select * from ql.runs r where r.pool = v_pool and r.status = 'retry_wait'", "runs_retry_offerable_idx",
             "(retry_at_ms)::bigint <="),
            ("select * from ql.runs r where r.pool = v_pool and r.status = 'queued'", "runs_offerable_idx",
             "ROW((queued_at_ms)::bigint, id) <"),
        ):  # fmt: skip
            plan = statement(plans, prefix)
            scans = [node for node in nodes(plan["Plan"]) if node.get("Relation Name") == "runs"]
            assert [(node["Node Type"], node["Index Name"]) for node in scans] == [("Index Scan", index)], plan
            assert bound in scans[0]["Index Cond"], (n, scans[0]["Index Cond"])  # a bound, not a filter
            assert buffers(plan["Plan"]) <= 10, (n, prefix, buffers(plan["Plan"]), seeded["pages"])
        events = [p for p in plans if " ".join(p["Query Text"].split()).startswith("insert into ql.run_events")]
        retry = offered[-1] in seeded["due"][4:12]
        assert len(events) == retry, "no event for a claim; run.requeued when the pull takes a retry"
    assert offered == seeded["due"], "the 4 older queued Runs, the 8 due retries, then the 4 newer queued Runs"
    assert call(conn, "ql_api.offer_pull_v1(%s, %s, %s, %s)", (*worker.head, digest("plan-token-x"))) == {
        "status": "empty",
        "reason": "no_work",
    }, "the 2000 retries not yet due are not offered"
