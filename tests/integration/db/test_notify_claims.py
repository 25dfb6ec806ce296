"""ql_api.notify_claim_v1 between two dispatchers at once (pgTAP runs in one session and cannot show it): a page
claimed by a transaction not yet committed is skipped by another claim (FOR UPDATE SKIP LOCKED), never waited for
and never claimed twice; after the first commits, its rows are not due again until their lease passes.

Touches: the test database (rows written as the superuser, the claims made as ql_notify).
"""

from __future__ import annotations

import time
from typing import Any

import psycopg

from tests.conftest import Database
from tests.integration.db.factories import make_project


def _pending(conn: psycopg.Connection[Any], count: int) -> None:
    project = make_project(conn)
    rule = conn.execute(
        "insert into ql.notify_rules (project_id, name, events, channel, url, secret_name, created_at_ms,"
        " updated_at_ms) values (%s, 'r', '{run.failed}', 'webhook', 'https://x.example/h', 'K', 0, 0) returning id",
        (project,),
    ).fetchone()
    assert rule is not None
    conn.execute(
        "insert into ql.notify_outbox (rule_id, project_id, kind, payload, created_at_ms, next_attempt_at_ms)"
        " select %s, %s, 'run.failed', '{}', ql.now_ms(), ql.now_ms() - g from generate_series(1, %s) g",
        (rule[0], project, count),
    )


def _ids(answer: dict[str, Any]) -> set[str]:
    assert answer["status"] == "claimed", answer
    return {item["id"] for item in answer["items"]}


def test_two_dispatchers_never_claim_the_same_row(database: Database) -> None:
    with psycopg.connect(database.dsn(), autocommit=True) as admin:
        _pending(admin, 10)
    with (
        psycopg.connect(database.dsn("ql_notify")) as first,
        psycopg.connect(database.dsn("ql_notify"), autocommit=True) as second,
    ):
        row = first.execute("select ql_api.notify_claim_v1(6, 30000)").fetchone()  # its transaction stays open
        assert row is not None
        held = _ids(row[0])
        started = time.monotonic()
        row2 = second.execute("select ql_api.notify_claim_v1(10, 30000)").fetchone()
        assert row2 is not None
        other = _ids(row2[0])
        assert time.monotonic() - started < 2.0, "the second claim skipped the locked rows, it did not wait"
        assert len(held) == 6 and len(other) == 4 and not held & other
        first.commit()
        row3 = second.execute("select ql_api.notify_claim_v1(10, 30000)").fetchone()
        assert row3 is not None and _ids(row3[0]) == set(), "claimed rows are not due again before their lease"
