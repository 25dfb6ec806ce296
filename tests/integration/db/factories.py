"""Fixture builders for the convergence and cancellation tests: Projects, Tasks and revisions, queued
Runs in bulk, Workers with a live session and their pulled Attempts, user Subjects with a role, and
the checks every Run's event stream must pass.

Fixture rows (projects, tasks, runs, workers, subjects, bindings) are written directly by the
superuser, set-based where there are many; what the system under test does goes through
`select ql_api.<function>(%s, …)` as ql_runtime. Touches: the test's database only.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

FIXED_EXECUTOR = "00000000-0000-4000-8000-000000000001"
CERT = "cert"


def digest(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


def call(conn: psycopg.Connection[Any], fn: str, args: tuple[Any, ...]) -> dict[str, Any]:
    """`select ql_api.<fn>` with bind parameters; the function's jsonb result."""
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


def make_project(conn: psycopg.Connection[Any], name: str | None = None) -> uuid.UUID:
    row = conn.execute(
        "insert into ql.projects (name) values (%s) returning id", (name or f"p-{uuid.uuid4().hex[:8]}",)
    ).fetchone()
    assert row is not None
    project: uuid.UUID = row[0]
    return project


def make_revision(conn: psycopg.Connection[Any], project: uuid.UUID, plan: dict[str, Any]) -> uuid.UUID:
    """A Task of the Project whose current (immutable) revision has `plan`; the revision's id."""
    task = conn.execute(
        "insert into ql.tasks (project_id, name) values (%s, %s) returning id",
        (project, f"t-{uuid.uuid4().hex[:8]}"),
    ).fetchone()
    assert task is not None
    rev = conn.execute(
        "insert into ql.task_execution_revisions (task_id, project_id, plan_json, executor_revision_id)"
        " values (%s, %s, %s, %s) returning id",
        (task[0], project, json.dumps(plan), FIXED_EXECUTOR),
    ).fetchone()
    assert rev is not None
    conn.execute("update ql.tasks set current_revision_id = %s where id = %s", (rev[0], task[0]))
    revision: uuid.UUID = rev[0]
    return revision


def make_runs(conn: psycopg.Connection[Any], revision: uuid.UUID, count: int) -> list[uuid.UUID]:
    """`count` queued Runs of the revision (its plan's pool), each with its run.queued event (sequence
    1, version 2), queued in list order. Two set-based statements."""
    with conn.transaction():
        ids = [
            r[0]
            for r in conn.execute(
                "insert into ql.runs (project_id, task_id, task_revision_id, pool, status, queued_at_ms,"
                " created_at_ms)"
                " select t.project_id, t.task_id, t.id, coalesce(t.plan_json ->> 'pool', 'default'),"
                " 'created', ql.now_ms() + g, ql.now_ms()"
                " from ql.task_execution_revisions t cross join generate_series(1, %s) g where t.id = %s"
                " order by g returning id",
                (count, revision),
            ).fetchall()
        ]
        conn.execute(
            "select ql.run_event(q.id, 'queued', 'run.queued', 'system', null, null, '{}', ql.now_ms(),"
            " 'run.queued:' || q.id::text) from unnest(%s::uuid[]) q(id)",
            (ids,),
        )
    assert len(ids) == count
    return ids


@dataclass(frozen=True)
class WorkerHandle:
    """An enrolled Worker (generation 1) with one live session, as the shell would hold it."""

    id: uuid.UUID
    session: uuid.UUID

    @property
    def head(self) -> tuple[uuid.UUID, uuid.UUID, int]:
        return (self.id, self.session, 1)


def make_worker(conn: psycopg.Connection[Any], pool: str = "default") -> uuid.UUID:
    row = conn.execute(
        "insert into ql.workers (name, pool, cert_fingerprint) values (%s, %s, %s) returning id",
        (f"w-{uuid.uuid4().hex[:8]}", pool, digest(CERT)),
    ).fetchone()
    assert row is not None
    worker: uuid.UUID = row[0]
    return worker


def open_session(rt: psycopg.Connection[Any], worker: uuid.UUID, capacity: int) -> WorkerHandle:
    opened = call(rt, "ql_api.worker_session_open_v1(%s, 1, %s, %s)", (worker, digest(CERT), capacity))
    assert opened["status"] == "opened", opened
    return WorkerHandle(worker, uuid.UUID(opened["sessionId"]))


@dataclass(frozen=True)
class Offer:
    """A pulled offer and the raw lease token only the Worker knows (the database sees its digest)."""

    raw: dict[str, Any]
    token: str

    @property
    def run_id(self) -> uuid.UUID:
        return uuid.UUID(self.raw["runId"])

    @property
    def attempt_id(self) -> uuid.UUID:
        return uuid.UUID(self.raw["attemptId"])

    @property
    def fence(self) -> tuple[Any, ...]:
        """Project, Run, Attempt, Offer, Lease generation and token digest, in the API's order."""
        o = self.raw
        return (
            o["projectId"],
            o["runId"],
            o["attemptId"],
            o["offerId"],
            o["leaseGeneration"],
            digest(self.token),
        )


def pull(rt: psycopg.Connection[Any], worker: WorkerHandle) -> Offer:
    token = f"raw-token-{uuid.uuid4()}"
    pulled = call(rt, "ql_api.offer_pull_v1(%s, %s, %s, %s)", (*worker.head, digest(token)))
    assert pulled["status"] == "offered", pulled
    return Offer(pulled["offer"], token)


def pull_many(rt: psycopg.Connection[Any], worker: WorkerHandle, count: int) -> list[Offer]:
    return [pull(rt, worker) for _ in range(count)]


def activate(rt: psycopg.Connection[Any], worker: WorkerHandle, offer: Offer, phase: str) -> dict[str, Any]:
    return call(
        rt,
        "ql_api.attempt_activation_v1(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, null)",
        (phase, *worker.head, *offer.fence),
    )


def complete(
    rt: psycopg.Connection[Any], worker: WorkerHandle, offer: Offer, lease_version: int, exit_code: int
) -> dict[str, Any]:
    return call(
        rt,
        "ql_api.attempt_complete_v1(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, null, '[]')",
        (*worker.head, *offer.fence, lease_version, exit_code),
    )


def lease_version(conn: psycopg.Connection[Any], offer: Offer) -> int:
    row = conn.execute("select version from ql.run_leases where attempt_id = %s", (offer.attempt_id,)).fetchone()
    assert row is not None
    version: int = row[0]
    return version


@dataclass(frozen=True)
class Subject:
    """A user Subject; the bearer token stays here, the database holds its digest."""

    id: uuid.UUID
    token: str


def make_user(conn: psycopg.Connection[Any]) -> Subject:
    token = f"bearer-{uuid.uuid4()}"
    row = conn.execute(
        "insert into ql.subjects (kind, name, token_digest) values ('user', %s, %s) returning id",
        (f"u-{uuid.uuid4().hex[:8]}", digest(token)),
    ).fetchone()
    assert row is not None
    return Subject(row[0], token)


def set_role(
    conn: psycopg.Connection[Any], project: uuid.UUID, subject: Subject, role: str, active: bool
) -> dict[str, Any]:
    """The operator's command (superuser; ql_runtime may not change policy)."""
    result = call(conn, "ql_api.role_binding_set_v1(%s, %s, %s, %s)", (project, subject.id, role, active))
    assert result["status"] == "set", result
    return result


@dataclass(frozen=True)
class Admission:
    project_version: int
    binding_version: int


def admit(rt: psycopg.Connection[Any], subject: Subject, project: uuid.UUID, permission: str = "run.stop") -> Admission:
    result = call(
        rt,
        "ql_api.request_admission_v1(%s, %s, %s, %s, %s)",
        (digest(subject.token), project, permission, "/api/v3/cancellation", f"req-{uuid.uuid4().hex}"),
    )
    assert result["decision"] == "allow", result
    return Admission(result["projectVersion"], result["bindingVersion"])


def stream_faults(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    """Runs whose events are not contiguous from 1, or whose version is not 1 + their event count."""
    return conn.execute(
        "select r.id, r.version, r.event_sequence, array_agg(e.sequence order by e.sequence)"
        " from ql.runs r left join ql.run_events e on e.run_id = r.id group by r.id"
        " having r.version <> 1 + r.event_sequence or r.event_sequence <> count(e.sequence)"
        " or coalesce(min(e.sequence), 1) <> 1 or coalesce(max(e.sequence), 0) <> count(e.sequence)"
    ).fetchall()


def duplicate_events(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    """How many event ids and dedupe keys occur more than once (both must be 0)."""
    row = conn.execute(
        "select count(*) - count(distinct event_id), count(*) - count(distinct dedupe_key) from ql.run_events"
    ).fetchone()
    assert row is not None
    return (row[0], row[1])


def event_types(conn: psycopg.Connection[Any], run: uuid.UUID) -> list[str]:
    return [
        r[0]
        for r in conn.execute("select type from ql.run_events where run_id = %s order by sequence", (run,)).fetchall()
    ]


def await_lock_wait(
    observer: psycopg.Connection[Any], condition: str, args: tuple[Any, ...] = (), within_s: float = 10.0
) -> None:
    """Until a backend of this database waits for a lock and matches `condition` (SQL over pg_stat_activity)."""
    query = sql.SQL(
        "select exists (select from pg_stat_activity where datname = current_database()"
        " and wait_event_type = 'Lock' and {})"
    ).format(sql.SQL(condition))  # the caller's own SQL (a test's literal), never input
    deadline = time.monotonic() + within_s
    while observer.execute(query, args).fetchone() != (True,):
        assert time.monotonic() < deadline, f"no backend waited for a lock ({condition})"
        time.sleep(0.01)
