"""A start failure's reason through the real shell (TLS, ql3w) and database: the start-failure ACK's code must be
one of the catalogue (qinglong.wire.reasons) and its message fit; a bad one is a typed 400 and changes nothing; a
good one ends the Attempt with its code, keeps its message, and the user API's timeline shows both; the body a
Worker of the previous release sends (no message) still applies.
Touches: a fresh database, the in-process shell, its worker-ingress and user APIs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from qinglong.wire.activation import ACTIVATION_SCHEMA
from tests.conftest import Database as PgDatabase
from tests.integration.shell.conftest import (
    Offered,
    Pki,
    Reply,
    Seed,
    Shell,
    WorkerClient,
    image_diff,
    ql_image,
    user_call,
    user_http,
)

pytestmark = pytest.mark.db

MESSAGE = "the plan names no user and this Worker does not run tasks as root"


async def start_failure(worker: WorkerClient, offered: Offered, **fields: Any) -> Reply:
    body = {"schema": ACTIVATION_SCHEMA, **offered.fence(), **fields}
    return await worker.post(f"/offers/{offered.offer_id}/activation/start-failure", body)


async def timeline(pki: Pki, shell: Shell, seed: Seed, run: str) -> dict[str, Any]:
    async with user_http(pki) as http:
        reply = await user_call(http, shell, "GET", f"/api/v3/projects/{seed.project_p}/runs/{run}",
                                token=seed.viewer.token)  # fmt: skip
    assert reply.status == 200, reply
    return reply.json()


def end_of(answer: dict[str, Any]) -> dict[str, Any]:
    [end] = [json.loads(e["payload"]) for e in answer["events"] if e["type"] == "attempt.failed"]
    assert isinstance(end, dict)
    return end


async def test_a_bad_reason_is_a_typed_400_and_a_good_one_reaches_the_timeline(
    pki: Pki, shell: Shell, seed: Seed, database: PgDatabase
) -> None:
    async with WorkerClient(shell, seed.worker_a, pki.client_context(pki.worker_a)) as worker:
        assert (await worker.open()).status == 200
        offered = await worker.pull()
        run = offered.offer["runId"]
        before = await ql_image(database.dsn())
        bad: list[tuple[dict[str, Any], str]] = [
            ({"errorCode": "spawn.enoent"}, "wire.bad_enum"),  # well formed, but no code of the catalogue
            ({"errorCode": "x" * 65}, "wire.bad_enum"),  # oversized
            ({"errorCode": "Not A Code"}, "wire.bad_enum"),
            ({}, "wire.missing_field"),
            ({"errorCode": "plan.root_not_allowed", "errorMessage": "m" * 201}, "wire.too_long"),
            ({"errorCode": "plan.root_not_allowed", "errorMessage": ""}, "wire.too_short"),
            ({"errorCode": "plan.root_not_allowed", "errorMessage": "two\nlines"}, "wire.control_character"),
            ({"errorCode": "plan.root_not_allowed", "errorMessage": None}, "wire.bad_type"),
        ]
        for fields, code in bad:
            reply = await start_failure(worker, offered, **fields)
            assert (reply.status, reply.code) == (400, code), (fields, reply)
        said = {"schema": ACTIVATION_SCHEMA, **offered.fence(), "errorMessage": "why"}
        running = await worker.post(f"/offers/{offered.offer_id}/activation/starting", said)
        assert (running.status, running.code) == (400, "wire.unknown_field"), running
        assert image_diff(before, await ql_image(database.dsn())) == {}, "a refused reason changed nothing"

        reply = await start_failure(worker, offered, errorCode="plan.root_not_allowed", errorMessage=MESSAGE)
        assert reply.status == 200 and reply.json()["status"] == "applied", reply
        assert reply.json()["snapshot"]["errorCode"] == "plan.root_not_allowed"
        again = await start_failure(worker, offered, errorCode="plan.root_not_allowed", errorMessage="other words")
        assert again.status == 200 and again.json()["status"] == "already_terminal", again
    answer = await timeline(pki, shell, seed, run)
    assert end_of(answer) == {"attemptNo": 1, "errorCode": "plan.root_not_allowed", "errorMessage": MESSAGE}


async def test_a_start_failure_without_a_message_still_applies(pki: Pki, shell: Shell, seed: Seed) -> None:
    """The body a Worker of the previous release sends: its code alone."""
    async with WorkerClient(shell, seed.worker_a, pki.client_context(pki.worker_a)) as worker:
        assert (await worker.open()).status == 200
        offered = await worker.pull()
        reply = await start_failure(worker, offered, errorCode="spawn.os_error")
        assert reply.status == 200 and reply.json()["status"] == "applied", reply
    answer = await timeline(pki, shell, seed, offered.offer["runId"])
    assert end_of(answer) == {"attemptNo": 1, "errorCode": "spawn.os_error"}
