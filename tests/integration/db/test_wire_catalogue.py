"""The value sets the wire shares with the database, read from the deployed catalogue: the outcome reasons
(enum types of ql/outcome_reasons, which ql.outcome casts to) are exactly qinglong.wire.errors'
FENCE_REASONS / INVALID_REASONS and the offer's empty reasons, in order; the status domains are exactly
the wire's status sets; and the wire's full Plan is a plan ql.plan_is_valid admits, with nothing more.
Touches: one fresh database (reads, and ql.plan_is_valid calls).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from qinglong.wire import OfferEmpty, Plan
from qinglong.wire.common import ATTEMPT_STATUSES, CANCEL_REASONS, RUN_STATUSES
from qinglong.wire.errors import FENCE_REASONS, INVALID_REASONS
from qinglong.wire.fields import Enum
from qinglong.wire.timeline import ACTOR_KINDS
from tests.conftest import Database

pytestmark = pytest.mark.db

EMPTY_REASONS = OfferEmpty.field("reason").spec
assert isinstance(EMPTY_REASONS, Enum)
ENUM_VALUES = "select enumlabel from pg_catalog.pg_enum where enumtypid = %s::regtype order by enumsortorder"
# A domain's CHECK (value in (…)) as PostgreSQL deparses it: VALUE = ANY (ARRAY['a'::text, …]).
DOMAIN_VALUES = """
select array(select m[1] from regexp_matches(pg_get_constraintdef(c.oid), '''([^'']*)''::text', 'g') m)
from pg_catalog.pg_constraint c where c.contypid = %s::regtype
"""


@pytest.fixture
def conn(database: Database) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(database.dsn(), autocommit=True) as c:
        yield c


@pytest.mark.parametrize(
    ("sql_type", "wire"),
    [
        ("ql.fence_reason", FENCE_REASONS),
        ("ql.invalid_reason", INVALID_REASONS),
        ("ql.empty_reason", EMPTY_REASONS.values),
    ],
)
def test_outcome_reasons_are_the_wire_s(conn: psycopg.Connection[Any], sql_type: str, wire: tuple[str, ...]) -> None:
    labels = conn.execute(ENUM_VALUES, (sql_type,)).fetchall()  # enum_range's order: enumsortorder
    assert tuple(label for (label,) in labels) == tuple(wire)


@pytest.mark.parametrize(
    ("domain", "wire"),
    [
        ("ql.run_status", RUN_STATUSES),
        ("ql.attempt_status", ATTEMPT_STATUSES),
        ("ql.cancel_reason", CANCEL_REASONS),
        ("ql.actor_kind", ACTOR_KINDS),
    ],
)
def test_status_domains_are_the_wire_s(conn: psycopg.Connection[Any], domain: str, wire: tuple[str, ...]) -> None:
    rows = conn.execute(DOMAIN_VALUES, (domain,)).fetchall()
    assert len(rows) == 1, f"{domain}: one CHECK"
    assert tuple(rows[0][0]) == tuple(wire)


def test_the_wire_s_full_plan_is_a_valid_plan_and_nothing_more_is(conn: psycopg.Connection[Any]) -> None:
    full = Plan(
        argv=("sh", "-c", "true"),
        env={"A": "1"},
        timeout_ms=1000,
        lease_ms=300_000,
        max_attempts=3,
        retry_backoff_ms=0,
        pool="default",
        cwd="out",
        user="nobody",
        group="nogroup",
        secret_env={"PGPASSWORD": "DB_PASSWORD"},
        secret_files={"conf/api.key": "API_KEY"},
        bundle="0123456789abcdef" * 4,
    ).to_obj()
    assert set(full) == {f.name for f in Plan.FIELDS}

    def valid(plan: dict[str, object]) -> bool:
        row = conn.execute("select ql.plan_is_valid(%s)", (Jsonb(plan),)).fetchone()
        assert row is not None
        return bool(row[0])

    assert valid(full)
    assert not valid({**full, "shell": True})
    assert not valid({**full, "cwd": ""})
    assert not valid({**full, "user": "Nobody"})
    assert not valid({**full, "secretEnv": {"A": "DB_PASSWORD"}})  # a variable the plan's env sets too
    assert not valid({**full, "secretFiles": {"../api.key": "API_KEY"}})
    assert not valid({**full, "secretEnv": {"PGPASSWORD": "db_password"}})
    assert not valid({**full, "bundle": "0123456789ABCDEF" * 4})  # a digest in lowercase hex only
    assert not valid({**full, "leaseMs": 999})  # a Lease length is 1000..3600000 ms, as the wire has it
