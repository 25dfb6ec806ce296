"""Grouped calls (qinglong.shell.db, routes.Route.grouped): the lease-control calls queued in one event-loop
turn run as one statement (and those that arrive while every connection is busy, as the next one), and each
still gets its own answer: a fenced neighbour is answered fenced and
changes nothing, a call that fails in the database is re-run alone and fails alone (its neighbours renewed
exactly once), and a lost connection fails each call as it would alone. Also that the same renewals
through the shell's HTTPS route are grouped under concurrency and answered each for itself.
Touches: a fresh database, the in-process shell on loopback, the shell's metrics registry (read only).
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from qinglong.shell.db import Database, DatabaseFault, StorageUnavailable
from qinglong.shell.metrics import REGISTRY
from qinglong.shell.routes import ROUTES, Call
from qinglong.wire import LeaseControlRequest
from tests.conftest import Database as PgDatabase
from tests.integration.shell.conftest import Offered, Pki, Seed, Shell, WorkerClient

pytestmark = pytest.mark.db

RENEW = next(r for r in ROUTES if r.name == "worker.lease_control")
FUNCTION = RENEW.function


def _groups() -> tuple[float, float]:
    """(grouped statements, calls in them) of the lease-control function so far."""
    labels = {"function": FUNCTION}
    count = REGISTRY.get_sample_value("qinglong_shell_db_group_calls_count", labels) or 0.0
    total = REGISTRY.get_sample_value("qinglong_shell_db_group_calls_sum", labels) or 0.0
    return count, total


def _args(client: WorkerClient, offered: Offered, **changed: Any) -> dict[str, object]:
    """The lease-control arguments the route's own binder makes (`changed` overrides some afterwards)."""
    body = LeaseControlRequest.from_obj(offered.lease_control())
    call = Call(match={}, body=body, keyring=None, worker_id=client.worker_id, session_id=client.session_id)
    return {**RENEW.bind(call), **changed}


def _versions(dsn: str, offers: list[Offered]) -> list[int]:
    with psycopg.connect(dsn) as conn:
        return [
            int(conn.execute("select version from ql.run_leases where attempt_id = %s", (o.offer["attemptId"],))
                .fetchone()[0])  # type: ignore[index]
            for o in offers
        ]  # fmt: skip


async def _running(client: WorkerClient, count: int) -> list[Offered]:
    assert (await client.open(capacity=count)).status == 200
    offers = []
    for _ in range(count):
        offered = await client.pull()
        for phase in ("starting", "running"):
            reply = await client.activate(offered, phase)
            assert reply.status == 200 and reply.json()["status"] == "applied", reply
            offered.lease_version = int(reply.json()["snapshot"]["leaseVersion"])
        offers.append(offered)
    return offers


async def test_one_statement_each_its_own_answer(pki: Pki, shell: Shell, seed: Seed, database: PgDatabase) -> None:
    async with WorkerClient(shell, seed.worker_a, pki.client_context(pki.worker_a)) as a:
        offers = await _running(a, 3)
        good, stale, broken = offers
        before = _versions(database.dsn(), offers)
        count, total = _groups()
        # One turn: a good renewal, one with another lease token (fenced), one the database refuses
        # (a lease generation beyond bigint): the group fails as a whole, so each runs again alone.
        answers = await asyncio.gather(
            shell.db.call(FUNCTION, _args(a, good), grouped=True),
            shell.db.call(FUNCTION, _args(a, stale, p_token_digest=bytes(32)), grouped=True),
            shell.db.call(FUNCTION, _args(a, broken, p_lease_generation=2**63), grouped=True),
            return_exceptions=True,
        )
        assert _groups() == (count + 1, total + 3)
        assert isinstance(answers[0], dict) and answers[0]["status"] == "renewed", answers
        assert answers[0]["leaseVersion"] == good.lease_version + 1
        assert isinstance(answers[1], dict) and answers[1]["status"] == "fenced", answers
        assert isinstance(answers[2], DatabaseFault), answers
        # The good one renewed exactly once (not once in the failed group and again alone); the others unchanged.
        assert _versions(database.dsn(), offers) == [before[0] + 1, before[1], before[2]]

        # Without a bad neighbour the group commits in one statement: every call renewed once.
        count, total = _groups()
        good.lease_version += 1
        answers = await asyncio.gather(*(shell.db.call(FUNCTION, _args(a, o), grouped=True) for o in offers))
        assert _groups() == (count + 1, total + 3)
        assert [r["status"] for r in answers] == ["renewed"] * 3, answers
        assert _versions(database.dsn(), offers) == [before[0] + 2, before[1] + 1, before[2] + 1]


async def test_calls_that_arrive_while_every_connection_is_busy_make_one_group(
    pki: Pki, shell: Shell, seed: Seed, database: PgDatabase
) -> None:
    """Group commit: with the pool's one connection held by a renewal that waits on a row lock, renewals sent in
    separate event-loop turns queue behind it and then run as ONE statement, each answered for its own Attempt."""
    async with WorkerClient(shell, seed.worker_a, pki.client_context(pki.worker_a)) as a:
        first, *rest = await _running(a, 4)
        db = Database(database.runtime_dsn, max_size=1)
        await db.open()
        try:
            with psycopg.connect(database.dsn()) as blocker:
                blocker.execute(
                    "select 1 from ql.run_leases where attempt_id = %s for update", (first.offer["attemptId"],)
                )
                count, total = _groups()
                held = asyncio.ensure_future(db.call(FUNCTION, _args(a, first), grouped=True))
                later = []
                for offered in rest:  # one per turn, while the connection waits on the lock
                    await asyncio.sleep(0.05)
                    later.append(asyncio.ensure_future(db.call(FUNCTION, _args(a, offered), grouped=True)))
                await asyncio.sleep(0.1)
                assert not held.done() and not any(c.done() for c in later)
                blocker.rollback()
            answers = [await held, *[await c for c in later]]
        finally:
            await db.close()
        assert _groups() == (count + 2, total + 4), "the three queued behind the first did not make one group"
        assert [r["status"] for r in answers] == ["renewed"] * 4, answers
        assert [r["leaseVersion"] for r in answers] == [o.lease_version + 1 for o in (first, *rest)]
        assert _versions(database.dsn(), [first, *rest]) == [o.lease_version + 1 for o in (first, *rest)]


async def test_a_lost_connection_fails_each_call_alone(
    pki: Pki, shell: Shell, seed: Seed, database: PgDatabase
) -> None:
    """The group's connection is terminated while its statement waits on a row lock: its fate is unknown to the
    shell, so no call is re-run; each is answered storage.unavailable, as one call alone would be."""
    async with WorkerClient(shell, seed.worker_a, pki.client_context(pki.worker_a)) as a:
        offers = await _running(a, 2)
        before = _versions(database.dsn(), offers)
        with psycopg.connect(database.dsn()) as blocker:
            blocker.execute(
                "select 1 from ql.run_leases where attempt_id = %s for update", (offers[0].offer["attemptId"],)
            )
            calls = asyncio.gather(
                *(shell.db.call(FUNCTION, _args(a, o), grouped=True) for o in offers), return_exceptions=True
            )
            with psycopg.connect(database.dsn(), autocommit=True) as killer:
                for _ in range(200):
                    row = killer.execute(
                        "select pg_terminate_backend(pid) from pg_stat_activity"
                        " where wait_event_type = 'Lock' and query like %s",
                        (f"%{FUNCTION}%",),
                    ).fetchone()
                    if row is not None:
                        break
                    await asyncio.sleep(0.02)
                assert row is not None, "the group never waited on the lock"
            answers = await calls
            blocker.rollback()
        assert all(isinstance(x, StorageUnavailable) for x in answers), answers
        assert _versions(database.dsn(), offers) == before


async def test_concurrent_renewals_through_the_shell_are_grouped(
    pki: Pki, shell: Shell, seed: Seed, database: PgDatabase
) -> None:
    """Renewals sent at once on separate connections share statements; each answer is its own Attempt's (their
    Lease versions differ, and each next renewal expects the version its last answer gave)."""
    async with WorkerClient(shell, seed.worker_a, pki.client_context(pki.worker_a)) as a:
        offers = await _running(a, 3)
        for i, offered in enumerate(offers):
            for _ in range(2 * i):
                assert (await a.renew(offered)).status == 200
        others = [WorkerClient(shell, seed.worker_a, pki.client_context(pki.worker_a)) for _ in offers]
        try:
            for other in others:
                other.session_id, other.key = a.session_id, a.key
            count, total = _groups()
            for _ in range(20):
                expected = [o.lease_version + 1 for o in offers]
                replies = await asyncio.gather(*(c.renew(o) for c, o in zip(others, offers, strict=True)))
                assert all(r.status == 200 and r.json()["status"] == "renewed" for r in replies), replies
                assert [r.json()["leaseVersion"] for r in replies] == expected
            statements, calls = _groups()
            assert calls - total == 60
            assert statements - count < 60  # some shared a statement
            assert _versions(database.dsn(), offers) == [o.lease_version for o in offers]
        finally:
            for other in others:
                await other.http.close()
