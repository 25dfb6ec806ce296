"""Task output at scale: the statements of ql_api.run_output_v1, ql_api.output_expire_v1 and the tail trim of
ql_api.output_append_v1 read what they return through their indexes, over tens of thousands of chunks of
thousands of Attempts: a page of output is one range of ql.output_chunks_attempt_seq_idx after the cursor, a
retention page one range of ql.output_chunks_received_idx (and the emptied streams by their primary key), a trim
one range of the primary key; none scans a table. The plans are those of the functions'
own statements as PostgreSQL ran them (auto_explain answers each nested statement's plan as a notice). And
`CALL ql_api.converge()`, as pg_cron runs it, deletes expired output in bounded pages and nothing younger.
Touches: one fresh database per test (writes Runs, Attempts and output as the deployer would; reads plans).
"""

from __future__ import annotations

from typing import Any, Final

import psycopg
import pytest

from tests.conftest import Database
from tests.integration.db.factories import (
    activate,
    call,
    make_project,
    make_revision,
    make_runs,
    make_worker,
    open_session,
    pull,
)
from tests.integration.db.plans import buffers, explaining, nodes

pytestmark = pytest.mark.db

ENDED: Final = 2000  # ended Attempts of the history, 20 chunks each
CHUNKS_EACH: Final = 20
BIG: Final = 3000  # the chunks of the Attempt a reader pages through
DAY_MS: Final = 86400000
HEAD: Final = 524288
TAIL: Final = 524288
TAIL_CHUNK: Final = 100  # the live Attempt's tail, in chunks this small
TAIL_CHUNKS: Final = -(-TAIL // TAIL_CHUNK)  # enough of them to hold TAIL bytes: 5243
TAIL_FROM: Final = 1_000_000  # where its tail starts: the bytes between the head and here were dropped


def statement(plans: list[dict[str, Any]], prefix: str) -> dict[str, Any]:
    found = [p for p in plans if " ".join(p["Query Text"].split()).startswith(prefix)]
    assert len(found) == 1, [p["Query Text"][:80] for p in plans]
    return found[0]


def scans_of(plan: dict[str, Any], table: str) -> list[dict[str, Any]]:
    return [n for n in nodes(plan["Plan"]) if n.get("Relation Name") == table and n["Node Type"] != "ModifyTable"]


def using(plan: dict[str, Any], index: str) -> list[dict[str, Any]]:
    """The nodes that read `index` (an index scan, or the bitmap index scan under a bitmap heap scan)."""
    return [n for n in nodes(plan["Plan"]) if n.get("Index Name") == index]


def assert_no_seq_scan(plans: list[dict[str, Any]]) -> None:
    for plan in plans:
        for node in nodes(plan["Plan"]):
            assert not (
                node["Node Type"] == "Seq Scan" and node.get("Relation Name") in ("output_chunks", "output_streams")
            ), plan["Query Text"]


@pytest.fixture
def seeded(database: Database) -> dict[str, Any]:
    """ENDED ended Attempts with CHUNKS_EACH stdout chunks each, received 1 to 59 days ago (so about half are past
    the 30-day retention); one ended Attempt with BIG chunks of both streams; one running Attempt whose stdout has
    its head and a tail of TAIL_CHUNKS chunks from TAIL_FROM (the bytes between dropped). Vacuumed and analysed."""
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        project = make_project(conn)
        revision = make_revision(conn, project, {"argv": ["true"], "pool": "out"})
        worker = make_worker(conn, "out")
        [live_run] = make_runs(conn, revision, 1)
        with psycopg.connect(database.runtime_dsn, autocommit=True) as rt:
            handle = open_session(rt, worker, 4)
            offer = pull(rt, handle)
            assert activate(rt, handle, offer, "starting")["status"] == "applied"
            assert activate(rt, handle, offer, "running")["status"] == "applied"
        assert offer.run_id == live_run
        conn.execute(
            "insert into ql.runs (project_id, task_id, task_revision_id, pool, status, queued_at_ms, created_at_ms,"
            " ended_at_ms)"
            " select t.project_id, t.task_id, t.id, 'out', 'succeeded', ql.now_ms(), ql.now_ms() - g, ql.now_ms()"
            " from ql.task_execution_revisions t cross join generate_series(1, %s) g where t.id = %s",
            (ENDED + 1, revision),
        )
        conn.execute(
            "insert into ql.run_attempts (run_id, attempt_no, status, worker_id, worker_generation, offer_id,"
            " claimed_at_ms, ended_at_ms, exit_code, session_id, offer_expires_at_ms)"
            " select r.id, 1, 'succeeded', %s, 1, gen_random_uuid(), r.created_at_ms, r.ended_at_ms, 0,"
            " gen_random_uuid(), r.created_at_ms"
            " from ql.runs r where r.status = 'succeeded'",
            (worker,),
        )
        attempts = [r[0] for r in conn.execute("select id from ql.run_attempts where status = 'succeeded' order by id")]
        big, history = attempts[0], attempts[1:]
        # Staged first: a chunk's stream must exist before it (the foreign key), and a stream's row is its chunks' sum.
        conn.execute(
            "create temporary table staged as"
            " select attempt_id, stream, byte_offset, data, received_at_ms from ql.output_chunks where false"
        )
        # The history: chunk j of Attempt i received (i * CHUNKS_EACH + j) steps after 59 days ago, over 58 days.
        conn.execute(
            "insert into staged (attempt_id, stream, byte_offset, data, received_at_ms)"
            " select a.id, 'stdout', j * 64, convert_to(repeat('x', 64), 'UTF8'),"
            "        ql.now_ms() - 59 * %(day)s::bigint + ((a.n - 1) * %(each)s + j) * %(step)s"
            " from unnest(%(ids)s::uuid[]) with ordinality a(id, n) cross join generate_series(0, %(each)s - 1) j",
            {"day": DAY_MS, "each": CHUNKS_EACH, "step": 58 * DAY_MS // (ENDED * CHUNKS_EACH), "ids": history},
        )
        conn.execute(
            "insert into staged (attempt_id, stream, byte_offset, data, received_at_ms)"
            " select %s, case when j %% 3 = 0 then 'stderr' else 'stdout' end::ql.output_stream, j * 100,"
            "        convert_to(repeat('y', 100), 'UTF8'), ql.now_ms() - %s"
            " from generate_series(0, %s - 1) j",
            (big, DAY_MS, BIG),
        )
        conn.execute(
            "insert into staged (attempt_id, stream, byte_offset, data, received_at_ms)"
            " select %(a)s, 'stdout'::ql.output_stream, o, convert_to(repeat('h', 262144), 'UTF8'), ql.now_ms()"
            " from generate_series(0, %(head)s - 1, 262144) o"
            " union all"
            " select %(a)s, 'stdout', %(from)s + k * %(chunk)s, convert_to(repeat('t', %(chunk)s), 'UTF8'), ql.now_ms()"
            " from generate_series(0, %(n)s - 1) k",
            {"a": offer.attempt_id, "head": HEAD, "from": TAIL_FROM, "chunk": TAIL_CHUNK, "n": TAIL_CHUNKS},
        )
        conn.execute(
            "insert into ql.output_streams (attempt_id, stream)"
            " select c.attempt_id, c.stream from staged c group by c.attempt_id, c.stream"
        )
        conn.execute(
            "insert into ql.output_chunks (attempt_id, stream, byte_offset, data, received_at_ms)"
            " select attempt_id, stream, byte_offset, data, received_at_ms from staged order by received_at_ms"
        )
        run = conn.execute("select run_id from ql.run_attempts where id = %s", (big,)).fetchone()
        conn.execute("vacuum (analyze) ql.output_chunks, ql.output_streams, ql.run_attempts, ql.runs")
        total = conn.execute("select count(*) from ql.output_chunks").fetchone()
        old = conn.execute(
            "select count(*) from ql.output_chunks where received_at_ms < ql.now_ms() - 30 * %s::bigint", (DAY_MS,)
        ).fetchone()
    assert total is not None and old is not None and run is not None
    assert ENDED * CHUNKS_EACH // 3 < old[0] < ENDED * CHUNKS_EACH * 2 // 3, old
    return {
        "project": project,
        "big_run": run[0],
        "big": big,
        "handle": handle,
        "offer": offer,
        "total": total[0],
        "old": old[0],
    }


WALK: Final = "select c.seq, octet_length(c.data) as len from ql.output_chunks c"
PAGE: Final = "select coalesce(jsonb_agg(jsonb_build_object("


def test_a_page_of_output_is_one_index_range_after_the_cursor(database: Database, seeded: dict[str, Any]) -> None:
    conn, plans = explaining(database.dsn(), "ql_runtime")
    with conn:
        after = None
        seen: list[int] = []
        for n in range(3):
            plans.clear()
            page = call(
                conn, "ql_api.run_output_v1(%s, %s, null, %s, 100000)", (seeded["project"], seeded["big_run"], after)
            )
            assert page["status"] == "output" and page["attempt"]["attemptId"] == str(seeded["big"]), page
            seqs = [c["seq"] for c in page["chunks"]]  # 1000 chunks of 100 bytes fill a page of 100000
            assert len(seqs) == 1000 and seqs == sorted(seqs) and (not seen or seqs[0] > seen[-1])
            seen += seqs
            after = seqs[-1]
            assert page["more"] is (n < 2)
            assert_no_seq_scan(plans)
            # The walk: in seq order from the cursor, the page's chunks and the one that did not fit, no further.
            walk = statement(plans, WALK)
            [scan] = scans_of(walk, "output_chunks")
            assert (scan["Node Type"], scan["Index Name"]) == ("Index Scan", "output_chunks_attempt_seq_idx"), walk
            assert "attempt_id =" in scan["Index Cond"] and "seq >" in scan["Index Cond"], scan["Index Cond"]
            assert "Filter" not in scan and scan["Actual Rows"] == (1001 if n < 2 else 1000), scan
            # The page itself: the range of seqs the walk found.
            page_plan = statement(plans, PAGE)
            [scan] = using(page_plan, "output_chunks_attempt_seq_idx")
            assert "seq >" in scan["Index Cond"] and "seq <=" in scan["Index Cond"], scan["Index Cond"]
            assert scan["Actual Rows"] == 1000, scan
            # About a buffer a row, whatever else the table holds.
            assert buffers(walk["Plan"]) + buffers(page_plan["Plan"]) <= 2 * 1200
        assert len(seen) == BIG == len(set(seen))
        streams = {s["stream"]: s for s in page["streams"]}
        assert streams["stdout"]["keptBytes"] + streams["stderr"]["keptBytes"] == BIG * 100


def test_a_retention_page_is_one_range_of_the_received_index(database: Database, seeded: dict[str, Any]) -> None:
    conn, plans = explaining(database.dsn(), "ql_scheduler")
    with conn:
        expired = call(conn, "ql_api.output_expire_v1(%s)", (64,))
        # The 64 oldest chunks: every chunk of the 3 oldest Attempts (whose streams go too) and 4 of the next.
        assert expired == {"status": "ok", "deleted": 64, "streamsDeleted": 3}, expired
    assert_no_seq_scan(plans)
    plan = statement(plans, "with gone as ( delete from ql.output_chunks c using (select d.attempt_id")
    scans = scans_of(plan, "output_chunks")
    ranged = [s for s in scans if s.get("Index Name") == "output_chunks_received_idx"]
    assert len(ranged) == 1 and "(received_at_ms)::bigint <" in ranged[0]["Index Cond"], scans
    assert ranged[0]["Actual Rows"] == 64 and "Filter" not in ranged[0]
    assert buffers(plan["Plan"]) <= 20 * 64, buffers(plan["Plan"])
    streams = statement(plans, "delete from ql.output_streams s using unnest(v_attempts, v_streams_touched)")
    [scan] = using(streams, "output_streams_pkey")  # the streams the page touched, by key
    assert scan["Actual Rows"] <= 8, scan


def test_a_trim_is_one_range_of_the_primary_key(database: Database, seeded: dict[str, Any]) -> None:
    offer, handle = seeded["offer"], seeded["handle"]
    end = TAIL_FROM + TAIL_CHUNKS * TAIL_CHUNK
    conn, plans = explaining(database.dsn(), "ql_runtime")
    with conn:
        appended = call(
            conn,
            "ql_api.output_append_v1(%s, %s, %s, %s, %s, %s, %s, %s, %s, 'stdout', %s, %s)",
            (*handle.head, *offer.fence, end, b"z" * 1000),
        )
    assert appended == {
        "status": "appended", "stream": "stdout", "nextOffset": end + 1000, "headBytes": HEAD, "tailBytes": TAIL,
    }  # fmt: skip
    assert_no_seq_scan(plans)
    plan = statement(plans, "with trimmed as ( delete from ql.output_chunks c where c.attempt_id = p_attempt_id")
    [scan] = scans_of(plan, "output_chunks")  # an index scan, or a bitmap heap scan over the index's range
    [index] = using(plan, "output_chunks_pkey")  # the planner picks either with the statistics of the moment
    assert "byte_offset >=" in index["Index Cond"] and "byte_offset <" in index["Index Cond"], index["Index Cond"]
    # The 10 chunks the 1000 new bytes pushed out of the tail window (and the one that still reaches into it), not
    # the thousands of others.
    assert scan["Actual Rows"] == 10 and scan.get("Rows Removed by Filter", 0) <= 1, scan
    assert buffers(plan["Plan"]) <= 40, buffers(plan["Plan"])
    with psycopg.connect(database.dsn()) as check:
        kept = check.execute(
            "select min(byte_offset) filter (where byte_offset >= %s), count(*) from ql.output_chunks"
            " where attempt_id = %s",
            (HEAD, offer.attempt_id),
        ).fetchone()
    assert kept == (TAIL_FROM + 1000, 2 + TAIL_CHUNKS - 10 + 1), kept


def test_converge_expires_output_in_bounded_pages(database: Database, seeded: dict[str, Any]) -> None:
    with psycopg.connect(database.dsn("ql_scheduler"), autocommit=True) as scheduler:
        scheduler.execute("call ql_api.converge(%s, %s, %s)", (64, 2, 30000))
    with psycopg.connect(database.dsn(), autocommit=True) as conn:

        def counts() -> tuple[int, int]:
            row = conn.execute(
                "select count(*), count(*) filter (where received_at_ms < ql.now_ms() - 30 * %s::bigint)"
                " from ql.output_chunks",
                (DAY_MS,),
            ).fetchone()
            assert row is not None
            return row[0], row[1]

        assert counts() == (seeded["total"] - 128, seeded["old"] - 128), "two pages of 64: the 128 oldest chunks"
        with psycopg.connect(database.dsn("ql_scheduler"), autocommit=True) as scheduler:
            for _ in range(1 + seeded["old"] // (64 * 64)):
                scheduler.execute("call ql_api.converge(%s, %s, %s)", (64, 64, 30000))
        assert counts() == (seeded["total"] - seeded["old"], 0), "every expired chunk went, no younger one"
        emptied = conn.execute(
            "select count(*) from ql.output_streams s where not exists (select 1 from ql.output_chunks c"
            " where c.attempt_id = s.attempt_id and c.stream = s.stream)"
        ).fetchone()
        assert emptied == (0,), "the emptied streams of ended Attempts went with their last chunk"
