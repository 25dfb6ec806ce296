"""User cancellation (decision 0000 (ADR-0118 §6)) racing a role revocation, and racing the Worker's completion plus
a convergence page, through the real SQL API, many rounds each with random small delays so both
orders happen.

Revocation: a cancellation is accepted only when it committed before the revocation (the revocation,
after taking the Project lock, already sees its intent); otherwise it is fenced and writes nothing,
and never does a cancellation that began after the revocation committed write an intent.
Completion: the Run gets exactly one terminal event and its Attempt ends exactly once; cancelled if
the intent came first, else succeeded (and the cancellation answers already_terminal).
The cancellation runs as the shell does: SERIALIZABLE, retried on 40001 a bounded number of times.
Touches: one fresh database per test.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
import pytest

from tests.conftest import Database
from tests.integration.db.factories import (
    Admission,
    Offer,
    Subject,
    WorkerHandle,
    acall,
    activate,
    admit,
    duplicate_events,
    event_types,
    lease_version,
    make_project,
    make_revision,
    make_runs,
    make_user,
    make_worker,
    open_session,
    pull,
    set_role,
    stream_faults,
)

pytestmark = [pytest.mark.db, pytest.mark.race]

ROUNDS = 60
SERIALIZATION_RETRIES = 5
JITTER_S = 0.005
RUN_TERMINAL = {"run.succeeded", "run.failed", "run.cancelled", "run.timed_out"}
ATTEMPT_ENDS = {
    "attempt.succeeded",
    "attempt.failed",
    "attempt.cancelled",
    "attempt.timed_out",
    "attempt.lost",
    "attempt.abandoned",
}
STARTED = ["run.queued", "attempt.starting"]

T = TypeVar("T")


@dataclass(frozen=True)
class Cancellation:
    result: dict[str, Any]
    tries: int
    began_at: float  # monotonic: when the BEGIN of the try that answered was sent


async def cancel_serializable(
    conn: psycopg.AsyncConnection[Any],
    subject: Subject,
    project: uuid.UUID,
    run: uuid.UUID,
    mutation: str,
    admission: Admission,
) -> Cancellation:
    """The shell's cancellation: one SERIALIZABLE transaction, retried on 40001 a bounded number of times."""
    for tries in range(1, SERIALIZATION_RETRIES + 1):
        began_at = time.monotonic()
        try:
            async with conn.transaction():
                result = await acall(
                    conn,
                    "ql_api.run_cancel_request_v1(%s, %s, %s, %s, %s, %s)",
                    (
                        subject.id,
                        project,
                        run,
                        mutation,
                        admission.project_version,
                        admission.binding_version,
                    ),
                )
        except psycopg.errors.SerializationFailure:
            continue
        return Cancellation(result, tries, began_at)
    raise AssertionError(f"cancellation of {run} still failed serialization after {SERIALIZATION_RETRIES} tries")


async def serializable_runtime(db: Database) -> psycopg.AsyncConnection[Any]:
    conn = await psycopg.AsyncConnection.connect(db.runtime_dsn, autocommit=True)
    await conn.set_isolation_level(psycopg.IsolationLevel.SERIALIZABLE)
    return conn


async def after_jitter(go: asyncio.Event, delay: float, action: Awaitable[T]) -> T:
    """Wait for the start signal and a random small delay, then act (`action` has not run yet)."""
    await go.wait()
    await asyncio.sleep(delay)
    return await action


# --- cancellation racing role revocation -------------------------------------------------------------


@dataclass(frozen=True)
class Revocation:
    result: dict[str, Any]
    intent_seen: int | None  # the Run's cancel_requested_at_ms as the revocation saw it, under its lock
    acked_at: float  # monotonic: when its COMMIT returned
    after_commit_ms: int  # ql.now_ms() read right after the commit


async def revoke(
    conn: psycopg.AsyncConnection[Any], project: uuid.UUID, subject: Subject, run: uuid.UUID
) -> Revocation:
    """The operator revokes the role (superuser, READ COMMITTED) and, in the same transaction after
    its Project lock, looks at the Run: an intent it sees committed before the revocation."""
    async with conn.transaction():
        result = await acall(conn, "ql_api.role_binding_set_v1(%s, %s, 'operator', false)", (project, subject.id))
        cur = await conn.execute("select cancel_requested_at_ms from ql.runs where id = %s", (run,))
        seen = await cur.fetchone()
    acked_at = time.monotonic()
    cur = await conn.execute("select ql.now_ms()")
    now = await cur.fetchone()
    assert seen is not None and now is not None
    return Revocation(result, seen[0], acked_at, now[0])


def check_revocation_round(
    conn: psycopg.Connection[Any],
    run: uuid.UUID,
    subject: Subject,
    mutation: str,
    cancellation: Cancellation,
    revocation: Revocation,
) -> str:
    """Asserts one round's invariants; returns which committed first."""
    result = cancellation.result
    assert revocation.result["status"] == "set" and revocation.result["active"] is False, revocation.result
    row = conn.execute(
        "select status, version, event_sequence, cancel_requested_at_ms, cancel_reason from ql.runs where id = %s",
        (run,),
    ).fetchone()
    assert row is not None
    status, version, sequence, intent_at, reason = row
    events = conn.execute(
        "select sequence, type, actor_kind, actor_id from ql.run_events where run_id = %s order by sequence",
        (run,),
    ).fetchall()
    mutation_rows = conn.execute(
        "select result ->> 'status' from ql.mutations where subject_id = %s and mutation_id = %s",
        (subject.id, mutation),
    ).fetchall()

    if result["status"] == "accepted":
        # Committed before the revocation: the revocation, holding the Project lock, saw the intent.
        assert revocation.intent_seen == intent_at, (result, revocation)
        assert intent_at is not None and intent_at <= revocation.after_commit_ms, (intent_at, revocation)
        assert result["cancelRequestedAtMs"] == intent_at and result["reason"] == reason == "user"
        assert events == [(1, "run.queued", "system", None), (2, "run.cancel_requested", "user", subject.id)]
        assert (status, version, sequence) == ("queued", 3, 2)
        assert mutation_rows == [("accepted",)]
        # Never an intent from a transaction that began after the revocation committed.
        assert cancellation.began_at < revocation.acked_at, "an intent began after the revocation committed"
        return "cancellation_first"

    # The most specific reason: the revocation also moved the project version (ql.policy_fence).
    assert (result["status"], result["reason"]) == ("fenced", "binding_revoked"), result
    assert revocation.intent_seen is None
    assert (intent_at, reason) == (None, None)
    assert events == [(1, "run.queued", "system", None)]
    assert (status, version, sequence) == ("queued", 2, 1)
    assert mutation_rows == []
    return "revocation_first"


async def test_cancellation_racing_role_revocation_never_writes_after_the_revocation(
    database: Database,
) -> None:
    rnd = random.Random(20260723)  # noqa: S311 - a reproducible schedule, not a secret
    orders: Counter[str] = Counter()
    tries: Counter[int] = Counter()
    fences: Counter[str] = Counter()
    late = 0  # cancellations whose answering transaction began after the revocation committed
    with (
        psycopg.connect(database.dsn(), autocommit=True) as setup,
        psycopg.connect(database.runtime_dsn, autocommit=True) as rt,
    ):
        project = make_project(setup, "revocation-race")
        revision = make_revision(setup, project, {"argv": ["true"]})
        user = make_user(setup)
        async with (
            await serializable_runtime(database) as shell,
            await psycopg.AsyncConnection.connect(database.dsn(), autocommit=True) as operator,
        ):
            for round_ in range(ROUNDS):
                run = make_runs(setup, revision, 1)[0]
                set_role(setup, project, user, "operator", True)
                admission = admit(rt, user, project)
                mutation = f"cancel-{round_}-{uuid.uuid4().hex[:8]}"
                go = asyncio.Event()
                cancel = cancel_serializable(shell, user, project, run, mutation, admission)
                race = asyncio.gather(
                    after_jitter(go, rnd.uniform(0, JITTER_S), cancel),
                    after_jitter(go, rnd.uniform(0, JITTER_S), revoke(operator, project, user, run)),
                )
                go.set()
                cancellation, revocation = await race
                orders[check_revocation_round(setup, run, user, mutation, cancellation, revocation)] += 1
                tries[cancellation.tries] += 1
                if cancellation.result["status"] == "fenced":
                    fences[cancellation.result["reason"]] += 1
                late += cancellation.began_at > revocation.acked_at
        assert stream_faults(setup) == []
        assert duplicate_events(setup) == (0, 0)
    print(
        f"\nrevocation race, {ROUNDS} rounds: {dict(orders)}; cancellation tries: {dict(tries)};"
        f" fence reasons: {dict(fences)}; began after the revocation committed: {late}"
    )
    assert orders["cancellation_first"] >= 1 and orders["revocation_first"] >= 1, orders


# --- cancellation racing completion ------------------------------------------------------------------


async def complete_async(
    conn: psycopg.AsyncConnection[Any], worker: WorkerHandle, offer: Offer, version: int
) -> dict[str, Any]:
    return await acall(
        conn,
        "ql_api.attempt_complete_v1(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 0, null, '[]')",
        (*worker.head, *offer.fence, version),
    )


def check_completion_round(
    conn: psycopg.Connection[Any],
    offer: Offer,
    cancellation: Cancellation,
    completion: dict[str, Any],
    page: dict[str, Any],
) -> str:
    """Asserts one round's invariants; returns the Run's terminal status."""
    run = offer.run_id
    types = event_types(conn, run)
    terminal = [t for t in types if t in RUN_TERMINAL]
    ended = [t for t in types if t in ATTEMPT_ENDS]
    assert len(terminal) == 1, f"run {run}: terminal events {types}"
    assert len(ended) == 1, f"run {run}: attempt ended {len(ended)}x: {types}"
    row = conn.execute(
        "select r.status, r.cancel_reason, r.cancel_requested_at_ms, r.current_attempt_id, a.status,"
        " a.ended_at_ms, a.callback_sequence, a.completion_digest is not null"
        " from ql.runs r join ql.run_attempts a on a.run_id = r.id where a.id = %s",
        (offer.attempt_id,),
    ).fetchone()
    assert row is not None
    run_status, reason, intent_at, current, attempt_status, ended_at, callbacks, has_digest = row
    assert current is None and ended_at is not None and has_digest
    assert callbacks == 3  # starting, running, completion: the Attempt ended exactly once
    assert completion["status"] == "completed", completion
    assert (completion["runStatus"], completion["attemptStatus"]) == (run_status, attempt_status)
    # The Run is running (past the start barrier): never a convergence candidate, never faked.
    assert page["status"] == "ok", page
    assert str(run) not in page["convergedRunIds"] + page["blockedRunIds"], page

    if "run.cancel_requested" in types:
        # The intent committed first: the completion, locking the Run after it, ends it cancelled.
        assert cancellation.result["status"] == "accepted", cancellation.result
        assert cancellation.result["runStatus"] == "running"
        assert intent_at == cancellation.result["cancelRequestedAtMs"] and intent_at <= ended_at
        assert types == [*STARTED, "run.cancel_requested", "attempt.cancelled", "run.cancelled"], types
        assert (run_status, attempt_status, reason) == ("cancelled", "cancelled", "user")
    else:
        assert cancellation.result["status"] == "already_terminal", cancellation.result
        assert cancellation.result["runStatus"] == "succeeded"
        assert types == [*STARTED, "attempt.succeeded", "run.succeeded"], types
        assert (run_status, attempt_status, reason) == ("succeeded", "succeeded", None)
    return str(run_status)


async def test_cancellation_racing_completion_ends_the_run_exactly_once(database: Database) -> None:
    rnd = random.Random(20260724)  # noqa: S311 - a reproducible schedule, not a secret
    outcomes: Counter[str] = Counter()
    tries: Counter[int] = Counter()
    with (
        psycopg.connect(database.dsn(), autocommit=True) as setup,
        psycopg.connect(database.runtime_dsn, autocommit=True) as rt,
    ):
        project = make_project(setup, "completion-race")
        revision = make_revision(setup, project, {"argv": ["true"]})
        user = make_user(setup)
        set_role(setup, project, user, "operator", True)
        worker = open_session(rt, make_worker(setup), 4)
        async with (
            await serializable_runtime(database) as shell,
            await psycopg.AsyncConnection.connect(database.runtime_dsn, autocommit=True) as worker_conn,
            await psycopg.AsyncConnection.connect(database.dsn("ql_scheduler"), autocommit=True) as scheduler,
        ):
            for round_ in range(ROUNDS):
                run = make_runs(setup, revision, 1)[0]
                offer = pull(rt, worker)
                assert offer.run_id == run
                for phase in ("starting", "running"):
                    assert activate(rt, worker, offer, phase)["status"] == "applied"
                version = lease_version(setup, offer)
                admission = admit(rt, user, project)
                mutation = f"cancel-{round_}-{uuid.uuid4().hex[:8]}"
                go = asyncio.Event()
                cancel = cancel_serializable(shell, user, project, run, mutation, admission)
                finish = complete_async(worker_conn, worker, offer, version)
                converge = acall(scheduler, "ql_api.run_cancellation_converge_v1(%s)", (128,))
                race = asyncio.gather(
                    after_jitter(go, rnd.uniform(0, JITTER_S), cancel),
                    after_jitter(go, rnd.uniform(0, JITTER_S), finish),
                    after_jitter(go, rnd.uniform(0, JITTER_S), converge),
                )
                go.set()
                cancellation, completion, page = await race
                outcomes[check_completion_round(setup, offer, cancellation, completion, page)] += 1
                tries[cancellation.tries] += 1
        assert stream_faults(setup) == []
        assert duplicate_events(setup) == (0, 0)
    print(f"\ncompletion race, {ROUNDS} rounds: {dict(outcomes)}; cancellation tries: {dict(tries)}")
    assert outcomes["cancelled"] >= 1 and outcomes["succeeded"] >= 1, outcomes
