"""Races on one Attempt through the real SQL API: starting/running ACKs, lease renewals and
completions from 16 runtime connections, against direct cancel intents from two more.

Afterwards every Run's events are contiguous from 1 and its version is 1 + its event count, no
event is duplicated, each accepted renewal grew the Lease by exactly one, and no Attempt ended
twice. Touches: one fresh database per round.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest

from tests.conftest import Database

pytestmark = [pytest.mark.db, pytest.mark.race]

RUNS = 8
RUNTIME_CONNECTIONS = 16
CANCEL_CONNECTIONS = 2
CALLS_PER_CONNECTION = 60
FIXED_EXECUTOR = "00000000-0000-4000-8000-000000000001"


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


@dataclass
class Offer:
    raw: dict[str, Any]
    token: str

    @property
    def ids(self) -> tuple[Any, ...]:
        o = self.raw
        return (o["projectId"], o["runId"], o["attemptId"], o["offerId"], o["leaseGeneration"])


@dataclass
class World:
    worker: uuid.UUID
    session: uuid.UUID
    offers: list[Offer]
    latest: dict[str, int] = field(default_factory=dict)  # attempt → newest lease version seen
    results: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)


def build_world(db: Database) -> World:
    """Two tasks (with and without a 1 ms timeout), RUNS queued Runs, one Worker that pulled all."""
    with psycopg.connect(db.dsn(), autocommit=True) as conn:
        project = conn.execute("insert into ql.projects (name) values ('race') returning id").fetchone()
        assert project is not None
        revisions = []
        plans = (("quick", {"argv": ["true"]}), ("timed", {"argv": ["true"], "timeoutMs": 1}))
        for name, plan in plans:
            task = conn.execute(
                "insert into ql.tasks (project_id, name) values (%s, %s) returning id", (project[0], name)
            ).fetchone()
            assert task is not None
            rev = conn.execute(
                "insert into ql.task_execution_revisions"
                " (task_id, project_id, plan_json, executor_revision_id)"
                " values (%s, %s, %s, %s) returning id",
                (task[0], project[0], json.dumps(plan), FIXED_EXECUTOR),
            ).fetchone()
            assert rev is not None
            revisions.append(rev[0])
        for i in range(RUNS):
            run = conn.execute(
                "insert into ql.runs (project_id, task_id, task_revision_id, pool, status, queued_at_ms,"
                " created_at_ms) select project_id, task_id, id, 'default', 'created', ql.now_ms() + %s,"
                " ql.now_ms() from ql.task_execution_revisions where id = %s returning id",
                (i, revisions[i % 2]),
            ).fetchone()
            assert run is not None
            conn.execute(
                "select ql.run_event(%s, 'queued', 'run.queued', 'system', null, null, '{}', ql.now_ms(),"
                " 'run.queued:' || %s::text)",
                (run[0], run[0]),
            )
        worker = conn.execute(
            "insert into ql.workers (name, cert_fingerprint) values ('w', %s) returning id", (digest("cert"),)
        ).fetchone()
        assert worker is not None
    with psycopg.connect(db.runtime_dsn, autocommit=True) as conn:
        opened = call(conn, "ql_api.worker_session_open_v1(%s, 1, %s, 64)", (worker[0], digest("cert")))
        session = uuid.UUID(opened["sessionId"])
        offers = []
        for i in range(RUNS):
            token = f"raw-token-{i}-{uuid.uuid4()}"
            pulled = call(conn, "ql_api.offer_pull_v1(%s, %s, 1, %s)", (worker[0], session, digest(token)))
            assert pulled["status"] == "offered", pulled
            offers.append(Offer(pulled["offer"], token))
    return World(worker[0], session, offers)


def call(conn: psycopg.Connection[Any], fn: str, args: tuple[Any, ...]) -> dict[str, Any]:
    row = conn.execute(f"select {fn}", args).fetchone()
    assert row is not None
    result: dict[str, Any] = row[0]
    return result


async def acall(conn: psycopg.AsyncConnection[Any], fn: str, args: tuple[Any, ...]) -> dict[str, Any]:
    cur = await conn.execute(f"select {fn}", args)
    row = await cur.fetchone()
    assert row is not None
    result: dict[str, Any] = row[0]
    return result


async def worker_actor(db: Database, w: World, seed: int) -> None:
    rnd = random.Random(seed)  # noqa: S311 - a reproducible schedule, not a secret
    async with await psycopg.AsyncConnection.connect(db.runtime_dsn, autocommit=True) as conn:
        for _ in range(CALLS_PER_CONNECTION):
            offer = rnd.choice(w.offers)
            attempt = offer.raw["attemptId"]
            head = (w.worker, w.session, 1)
            fence = (*offer.ids, digest(offer.token))
            action = rnd.choice(["starting", "running", "renew", "renew", "renew", "complete"])
            version = w.latest.get(attempt, 1)
            if action in ("starting", "running"):
                result = await acall(
                    conn,
                    "ql_api.attempt_activation_v1(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, null)",
                    (action, *head, *fence),
                )
            elif action == "renew":
                result = await acall(
                    conn,
                    "ql_api.attempt_lease_control_v1(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    (*head, *fence, version),
                )
                if result["status"] in ("renewed", "stop_requested"):
                    assert result["leaseVersion"] == version + 1
                    w.latest[attempt] = max(w.latest.get(attempt, 1), result["leaseVersion"])
            else:
                result = await acall(
                    conn,
                    "ql_api.attempt_complete_v1(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, null, '[]')",
                    (*head, *fence, version, rnd.choice([0, 0, 1])),
                )
            w.results.append((action, attempt, result))


async def cancel_actor(db: Database, w: World, seed: int) -> None:
    rnd = random.Random(seed)  # noqa: S311 - a reproducible schedule, not a secret
    async with await psycopg.AsyncConnection.connect(db.dsn(), autocommit=True) as conn:
        for _ in range(RUNS * 2):
            run = rnd.choice(w.offers).raw["runId"]
            async with conn.transaction():
                await conn.execute("select 1 from ql.runs where id = %s for no key update", (run,))
                await conn.execute("select ql.run_cancel_intent(%s, 'user', 'user', null, ql.now_ms())", (run,))
            await asyncio.sleep(rnd.random() / 200)


def drain(db: Database, w: World) -> None:
    """Finish every Attempt the race left open, in order, so each Run ends."""
    with psycopg.connect(db.runtime_dsn, autocommit=True) as conn, psycopg.connect(db.dsn()) as admin:
        for offer in w.offers:
            attempt = offer.raw["attemptId"]
            head = (w.worker, w.session, 1)
            fence = (*offer.ids, digest(offer.token))
            for phase in ("starting", "running"):
                r = call(
                    conn,
                    "ql_api.attempt_activation_v1(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, null)",
                    (phase, *head, *fence),
                )
                w.results.append((phase, attempt, r))
            row = admin.execute("select version from ql.run_leases where attempt_id = %s", (attempt,)).fetchone()
            admin.rollback()
            assert row is not None
            r = call(
                conn,
                "ql_api.attempt_complete_v1(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 0, null, '[]')",
                (*head, *fence, row[0]),
            )
            w.results.append(("complete", attempt, r))
            # An Attempt the race already completed with another exit code answers completion_conflict;
            # one a starting ACK ended under a cancel intent (not_started) was never completed: state_drift.
            ended_unstarted = any(a == attempt and x["status"] == "not_started" for _, a, x in w.results)
            assert (
                r["status"] in ("completed", "already_completed")
                or r.get("reason") == "completion_conflict"
                or (ended_unstarted and r.get("reason") == "state_drift")
            ), r


def check_invariants(db: Database, w: World) -> None:
    accepted_renewals: dict[str, list[int]] = defaultdict(list)
    applied: Counter[tuple[str, str]] = Counter()
    for action, attempt, r in w.results:
        if action == "renew" and r["status"] in ("renewed", "stop_requested"):
            accepted_renewals[attempt].append(r["leaseVersion"])
        if r["status"] in ("applied", "completed"):
            applied[(action, attempt)] += 1
        if r["status"] == "not_started":  # a starting ACK under an intent ended the Attempt
            applied[("complete", attempt)] += 1
        assert r["status"] not in ("invalid", "not_found"), r
        assert not any(o.token in json.dumps(r) for o in w.offers), "a result echoed a raw token"

    with psycopg.connect(db.dsn()) as conn:
        for run_id, status, version, sequence, seqs in conn.execute(
            "select r.id, r.status, r.version, r.event_sequence,"
            " array_agg(e.sequence order by e.sequence)"
            " from ql.runs r join ql.run_events e on e.run_id = r.id group by r.id"
        ).fetchall():
            assert seqs == list(range(1, sequence + 1)), f"run {run_id}: events not contiguous: {seqs}"
            assert version == 1 + sequence, f"run {run_id}: version {version} vs {sequence} events"
            assert status in ("succeeded", "failed", "cancelled", "timed_out"), (run_id, status)
        dupes = conn.execute(
            "select count(*) - count(distinct event_id), count(*) - count(distinct dedupe_key) from ql.run_events"
        ).fetchone()
        assert dupes == (0, 0)
        everything = conn.execute(
            "select string_agg(t, ' ') from (select r::text t from ql.runs r union all"
            " select a::text from ql.run_attempts a union all select l::text from ql.run_leases l union all"
            " select e::text from ql.run_events e) q"
        ).fetchone()
        assert everything is not None and everything[0]
        for o in w.offers:
            assert o.token not in everything[0], "a raw lease token reached the database"
            assert o.token.encode().hex() not in everything[0]
        per_type = conn.execute(
            "select run_id, type, count(*) from ql.run_events group by run_id, type having count(*) > 1"
        ).fetchall()
        assert per_type == [], f"an event type repeated within one Run: {per_type}"
        for offer in w.offers:
            attempt = offer.raw["attemptId"]
            row = conn.execute(
                "select a.status, a.version, a.callback_sequence, l.version, r.status, r.cancel_reason"
                " from ql.run_attempts a join ql.run_leases l on l.attempt_id = a.id"
                " join ql.runs r on r.id = a.run_id where a.id = %s",
                (attempt,),
            ).fetchone()
            assert row is not None
            a_status, a_version, callbacks, lease_version, r_status, reason = row
            versions = sorted(set(accepted_renewals[attempt]))  # a replay answers a version again, writing nothing
            assert versions == list(range(2, lease_version + 1)), (
                f"attempt {attempt}: renewals {versions} but lease version {lease_version}"
            )
            assert applied[("complete", attempt)] == 1, f"attempt {attempt} completed {applied[('complete', attempt)]}x"
            # At most one starting ACK was applied (none when a cancel intent ended the claim: not_started);
            # running at most once (completion may follow starting).
            assert applied[("starting", attempt)] <= 1
            assert applied[("running", attempt)] <= 1
            activations = applied[("starting", attempt)] + applied[("running", attempt)]
            assert callbacks == activations + 1
            assert a_version == 1 + activations + 1, "the Attempt's version: claimed, its ACKs, its end (not renewals)"
            expected = {"timeout": "timed_out", "user": "cancelled"}.get(reason or "", a_status)
            assert a_status == expected == r_status or (a_status == "failed" and r_status == "failed" and not reason)


@pytest.mark.parametrize("round_", range(10))
async def test_acks_renewals_completions_and_cancel_intents_race(database: Database, round_: int) -> None:
    w = build_world(database)
    actors = [worker_actor(database, w, round_ * 100 + i) for i in range(RUNTIME_CONNECTIONS)]
    actors += [cancel_actor(database, w, round_ * 1000 + i) for i in range(CANCEL_CONNECTIONS)]
    await asyncio.gather(*actors)
    drain(database, w)
    check_invariants(database, w)
    # The race must really have raced: some renewals lost to a concurrent winner, fenced (two or more
    # versions behind) or answered as the replay of the one just before (the same version again).
    fenced = Counter(r.get("reason") for _, _, r in w.results if r["status"] == "fenced")
    answered = [(a, r["leaseVersion"]) for act, a, r in w.results if act == "renew" and "leaseVersion" in r]
    replays = len(answered) - len(set(answered))
    assert fenced["stale_version"] + replays > 0, (fenced, replays)
