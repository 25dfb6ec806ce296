"""The user API (docs/architecture.md §6): bearer authentication, admission with a committed audit row before
the body is read, 404 for another Project's Run, 403 denied / approval_required, idempotent cancellation
and enqueue, and the Run timeline. Unauthenticated requests (401, nothing written): test_unauthenticated.py.
Touches: a fresh database, the in-process shell on loopback.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from tests.conftest import Database as PgDatabase
from tests.integration.shell.conftest import (
    Pki,
    Seed,
    Shell,
    audit_rows,
    image_diff,
    ql_image,
    user_call,
    user_http,
    wait_for,
)

pytestmark = pytest.mark.db

CANCEL = "qinglong/run-cancellation@v1"
ENQUEUE = "qinglong/run-enqueue@v1"


def _runs(seed: Seed, project: str, run: str | None = None) -> str:
    return f"/api/v3/projects/{project}/runs" + (f"/{run}" if run else "")


async def _run_row(dsn: str, run: str) -> tuple[str, int | None, int]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "select status, cancel_requested_at_ms, event_sequence from ql.runs where id = %s", (run,)
        )
        row = await cur.fetchone()
        assert row is not None
        return (str(row[0]), row[1], int(row[2]))


async def test_another_projects_run_is_not_found(pki: Pki, shell: Shell, seed: Seed, database: PgDatabase) -> None:
    q_run = seed.runs_q[0]
    async with user_http(pki) as http:
        before = await ql_image(database.dsn())
        read = await user_call(http, shell, "GET", _runs(seed, seed.project_p, q_run), token=seed.operator.token)
        assert (read.status, read.code) == (404, "not_found"), read
        cancel = await user_call(
            http,
            shell,
            "POST",
            _runs(seed, seed.project_p, q_run) + "/cancellation",
            token=seed.operator.token,
            body={"schema": CANCEL, "mutationId": "cross-project"},
        )
        assert (cancel.status, cancel.code) == (404, "not_found"), cancel
        # Q itself: the operator has no binding there, so Q is as missing as an unknown project.
        on_q = await user_call(http, shell, "GET", _runs(seed, seed.project_q, q_run), token=seed.operator.token)
        assert (on_q.status, on_q.code) == (404, "not_found"), on_q
        for reply in (read, cancel, on_q):
            assert q_run not in reply.body.decode() and seed.project_q not in reply.body.decode()
        # Only the three audit rows were written; Q's Run is untouched.
        assert image_diff(before, await ql_image(database.dsn())) == {"security_audit": 3}
        assert await _run_row(database.dsn(), q_run) == ("queued", None, 1)
        q_rows = [r for r in await audit_rows(database.dsn(), "user.runs.read") if r["project_id"] == seed.project_q]
        assert [(r["decision"], r["reason"]) for r in q_rows] == [("deny", "project.not_found")]


@pytest.mark.parametrize(
    ("who", "status", "code", "decision", "reason"),
    [
        ("viewer", 403, "denied", "deny", "role.insufficient"),
        ("agent", 403, "approval_required", "require_approval", "agent.approval_required"),
    ],
)
async def test_cancellation_refusals_are_audited(
    who: str,
    status: int,
    code: str,
    decision: str,
    reason: str,
    pki: Pki,
    shell: Shell,
    seed: Seed,
    database: PgDatabase,
) -> None:
    run = seed.runs_p[0]
    path = _runs(seed, seed.project_p, run) + "/cancellation"
    body = json.dumps({"schema": CANCEL, "mutationId": f"refused-{who.replace(' ', '-')}"}).encode()
    tokens = {"viewer": seed.viewer.token, "agent": seed.agent.token}
    subjects = {"viewer": str(seed.viewer.id), "agent": str(seed.agent.id)}
    before = await ql_image(database.dsn())
    async with user_http(pki) as http:
        reply = await user_call(http, shell, "POST", path, token=tokens[who], body=body)
    assert (reply.status, reply.code) == (status, code), reply
    assert image_diff(before, await ql_image(database.dsn())) == {"security_audit": 1}
    rows = await audit_rows(database.dsn(), "user.runs.cancel")
    assert len(rows) == 1, rows
    row = rows[0]
    assert (row["decision"], row["reason"], row["permission"], row["project_id"]) == (
        decision,
        reason,
        "run.stop",
        seed.project_p,
    )
    assert row["subject_id"] == subjects[who]
    assert row["request_id"] == reply.json()["requestId"]
    assert await _run_row(database.dsn(), run) == ("queued", None, 1)


async def test_cancellation_accepted_then_already_requested(
    pki: Pki, shell: Shell, seed: Seed, database: PgDatabase
) -> None:
    run = seed.runs_p[1]
    path = _runs(seed, seed.project_p, run) + "/cancellation"
    async with user_http(pki) as http:
        first = await user_call(
            http, shell, "POST", path, token=seed.operator.token, body={"schema": CANCEL, "mutationId": "c-1"}
        )
        assert first.status == 202, first
        accepted = first.json()
        assert (accepted["status"], accepted["runId"], accepted["reason"], accepted["runStatus"]) == (
            "accepted",
            run,
            "user",
            "queued",
        )
        _, requested_at, sequence = await _run_row(database.dsn(), run)
        assert requested_at == accepted["cancelRequestedAtMs"] and sequence == 2
        before = await ql_image(database.dsn())
        for mutation in ("c-1", "c-2"):  # the exact replay, and a second request
            again = await user_call(
                http, shell, "POST", path, token=seed.operator.token, body={"schema": CANCEL, "mutationId": mutation}
            )
            assert again.status == 200, again
            assert again.json()["status"] == "already_requested"
            assert again.json()["cancelRequestedAtMs"] == accepted["cancelRequestedAtMs"]
        diff = image_diff(before, await ql_image(database.dsn()))
        assert set(diff) <= {"security_audit", "mutations"} and diff["security_audit"] == 2, diff
        assert (await _run_row(database.dsn(), run))[2] == 2  # no second event

        timeline = await user_call(http, shell, "GET", _runs(seed, seed.project_p, run), token=seed.viewer.token)
        assert timeline.status == 200, timeline
        t = timeline.json()
        assert t["status"] == "found" and t["run"]["runId"] == run and t["run"]["cancelReason"] == "user"
        assert [e["type"] for e in t["events"]] == ["run.queued", "run.cancel_requested"]
        assert [e["sequence"] for e in t["events"]] == [1, 2]
        assert t["truncated"] is False


async def test_enqueue_then_already_enqueued(pki: Pki, shell: Shell, seed: Seed, database: PgDatabase) -> None:
    body = {"schema": ENQUEUE, "taskId": seed.task_p, "mutationId": "enqueue-1"}
    async with user_http(pki) as http:
        first = await user_call(http, shell, "POST", _runs(seed, seed.project_p), token=seed.operator.token, body=body)
        assert first.status == 202 and first.json()["status"] == "enqueued", first
        run = first.json()["runId"]
        again = await user_call(http, shell, "POST", _runs(seed, seed.project_p), token=seed.operator.token, body=body)
        assert again.status == 200, again
        assert {k: v for k, v in again.json().items() if k != "status"} == {
            k: v for k, v in first.json().items() if k != "status"
        }
        assert again.json()["status"] == "already_enqueued"
        # A task of another project is not found through P.
        other = {**body, "taskId": seed.task_q, "mutationId": "enqueue-2"}
        cross = await user_call(http, shell, "POST", _runs(seed, seed.project_p), token=seed.operator.token, body=other)
        assert (cross.status, cross.code) == (404, "not_found"), cross
        # A viewer may read but not start.
        viewer = await user_call(
            http, shell, "POST", _runs(seed, seed.project_p), token=seed.viewer.token, body={**body, "mutationId": "v"}
        )
        assert (viewer.status, viewer.code) == (403, "denied"), viewer
        timeline = await user_call(http, shell, "GET", _runs(seed, seed.project_p, run), token=seed.viewer.token)
        assert timeline.status == 200, timeline
        assert [e["type"] for e in timeline.json()["events"]] == ["run.queued"]
        assert timeline.json()["run"]["status"] == "queued"
        assert timeline.json()["run"]["taskId"] == seed.task_p
    async with await psycopg.AsyncConnection.connect(database.dsn(), autocommit=True) as conn:
        cur = await conn.execute("select count(*) from ql.runs where project_id = %s", (seed.project_p,))
        row = await cur.fetchone()
        assert row is not None and row[0] == len(seed.runs_p) + 1


async def test_audit_row_is_committed_before_the_body_is_read(
    pki: Pki, shell: Shell, seed: Seed, database: PgDatabase
) -> None:
    run = seed.runs_p[2]
    path = _runs(seed, seed.project_p, run) + "/cancellation"
    body = json.dumps({"schema": CANCEL, "mutationId": "slow-body"}).encode()
    release = asyncio.Event()
    sent_first = asyncio.Event()

    async def slow_body() -> AsyncIterator[bytes]:
        yield body[:1]  # the headers travel with the first chunk
        sent_first.set()
        await release.wait()
        yield body[1:]

    async def audited() -> list[dict[str, Any]]:
        return await audit_rows(database.dsn(), "user.runs.cancel")

    assert await audited() == []
    async with user_http(pki) as http:
        headers = {"Authorization": f"Bearer {seed.operator.token}", "Content-Type": "application/json"}

        async def send() -> tuple[int, dict[str, Any]]:
            async with http.post(shell.user_url + path, data=slow_body(), headers=headers) as resp:
                return resp.status, json.loads(await resp.read())

        request = asyncio.create_task(send())
        try:
            await asyncio.wait_for(sent_first.wait(), 5)
            rows = await wait_for(audited)  # from a separate superuser connection: committed
            assert not request.done()
            assert [(r["decision"], r["reason"], r["subject_id"]) for r in rows] == [
                ("allow", "ok", str(seed.operator.id))
            ]
            assert await _run_row(database.dsn(), run) == ("queued", None, 1)  # nothing else yet
        finally:
            release.set()
        status, answer = await asyncio.wait_for(request, 10)
    assert status == 202 and answer["status"] == "accepted", answer
    assert [r["request_id"] for r in await audited()] == [r["request_id"] for r in rows]
