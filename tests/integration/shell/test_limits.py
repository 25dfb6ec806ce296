"""Size and shape of request bodies (docs/architecture.md §5, §6): over-cap bodies are 413 (with a
Content-Length or chunked), malformed bodies 400 with the wire's stable code, a media type other
than application/json 415 — all correctly signed, so only the body decides — and none of them writes.
Touches: a fresh database, the in-process shell on loopback.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.conftest import Database as PgDatabase
from tests.integration.shell.conftest import (
    LEASE_CONTROL_SCHEMA,
    Offered,
    Pki,
    Seed,
    Shell,
    WorkerClient,
    audit_rows,
    image_diff,
    ql_image,
    user_call,
    user_http,
)

pytestmark = pytest.mark.db


async def _running(client: WorkerClient) -> Offered:
    assert (await client.open()).status == 200
    offered = await client.pull()
    for phase in ("starting", "running"):
        assert (await client.activate(offered, phase)).status == 200
    return offered


def _padded(body: dict[str, Any], size: int) -> bytes:
    """`body` with an extra field padding it to exactly `size` bytes."""
    base = json.dumps({**body, "padding": ""}).encode()
    return json.dumps({**body, "padding": "x" * (size - len(base))}).encode()


async def _chunks(data: bytes) -> AsyncIterator[bytes]:
    for i in range(0, len(data), 1024):
        yield data[i : i + 1024]


async def test_oversized_lease_control_is_413(pki: Pki, shell: Shell, seed: Seed, database: PgDatabase) -> None:
    async with WorkerClient(shell, seed.worker_a, pki.client_context(pki.worker_a)) as client:
        offered = await _running(client)
        body = _padded(offered.lease_control(), 9 * 1024)
        assert len(body) == 9 * 1024
        before = await ql_image(database.dsn())
        reply = await client.post("/lease-control", body)
        assert (reply.status, reply.code) == (413, "request.too_large"), reply
        # Without a Content-Length (chunked), the cap is enforced while reading.
        path = client.path("/lease-control")
        headers = {"Authorization": client.authorization(path, body), "Content-Type": "application/json"}
        reply = await client.send("POST", path, _chunks(body), headers)
        assert (reply.status, reply.code) == (413, "request.too_large"), reply
        # Just under the cap is read and parsed: the padding is an unknown field (400, not 413).
        reply = await client.post("/lease-control", _padded(offered.lease_control(), 8 * 1024))
        assert (reply.status, reply.code) == (400, "wire.unknown_field"), reply
        assert image_diff(before, await ql_image(database.dsn())) == {}


async def test_malformed_bodies_are_400_with_the_wire_code(
    pki: Pki, shell: Shell, seed: Seed, database: PgDatabase
) -> None:
    async with WorkerClient(shell, seed.worker_a, pki.client_context(pki.worker_a)) as client:
        offered = await _running(client)
        good = offered.lease_control()
        text = json.dumps(good)
        cases: dict[str, tuple[bytes, str]] = {
            "duplicate key": (
                (text[:-1] + ', "expectedVersion": 1}').encode(),
                "wire.duplicate_key",
            ),
            "nested duplicate key": (
                (text[:-1] + ', "x": {"a": 1, "a": 2}}').encode(),
                "wire.duplicate_key",
            ),
            "unknown field": (json.dumps({**good, "stopReason": "user"}).encode(), "wire.unknown_field"),
            "missing field": (
                json.dumps({k: v for k, v in good.items() if k != "offerId"}).encode(),
                "wire.missing_field",
            ),
            "wrong schema": (
                json.dumps({**good, "schema": LEASE_CONTROL_SCHEMA.replace("@v1", "@v2")}).encode(),
                "wire.bad_schema",
            ),
            "another family's schema": (
                json.dumps({**good, "schema": "qinglong/remote-run-activation@v1"}).encode(),
                "wire.bad_schema",
            ),
            "upper-case uuid": (json.dumps({**good, "runId": good["runId"].upper()}).encode(), "wire.bad_uuid"),
            "braced uuid": (json.dumps({**good, "runId": "{" + good["runId"] + "}"}).encode(), "wire.bad_uuid"),
            "integer as string": (json.dumps({**good, "expectedVersion": "1"}).encode(), "wire.bad_type"),
            "integer as float": (json.dumps({**good, "expectedVersion": 1.0}).encode(), "wire.bad_type"),
            "integer too large": (
                json.dumps({**good, "expectedVersion": 2**53}).encode(),
                "wire.out_of_range",
            ),
            "not an object": (json.dumps([good]).encode(), "wire.not_object"),
            "not json": (b"{schema: 1}", "wire.invalid_json"),
            "not utf-8": (text.encode()[:-1] + b'\xff"}', "wire.invalid_utf8"),
            "control character": (
                json.dumps({**good, "runId": good["runId"][:-1] + "\u0007"}).encode(),
                "wire.control_character",
            ),
        }
        before = await ql_image(database.dsn())
        got = {}
        for name, (body, _) in cases.items():
            reply = await client.post("/lease-control", body)
            got[name] = (reply.status, reply.code)
        assert got == {name: (400, code) for name, (_, code) in cases.items()}
        # A non-canonical uuid in the path is refused before anything else.
        upper = client.path("/lease-control").replace(str(client.session_id), str(client.session_id).upper())
        reply = await client.post("", json.dumps(good).encode(), path=upper)
        assert (reply.status, reply.code) == (400, "wire.bad_uuid"), reply
        assert image_diff(before, await ql_image(database.dsn())) == {}


async def test_wrong_media_type_is_415(pki: Pki, shell: Shell, seed: Seed, database: PgDatabase) -> None:
    async with WorkerClient(shell, seed.worker_a, pki.client_context(pki.worker_a)) as client:
        offered = await _running(client)
        raw = json.dumps(offered.lease_control()).encode()
        before = await ql_image(database.dsn())
        for content_type in ("text/plain", "application/x-www-form-urlencoded", "application/json-seq"):
            reply = await client.post("/lease-control", raw, content_type=content_type)
            assert (reply.status, reply.code) == (415, "request.unsupported_media_type"), (content_type, reply)
        assert image_diff(before, await ql_image(database.dsn())) == {}

    # The user API too: admitted (an audit row, allow) but the body is never parsed, nothing else written.
    async with user_http(pki) as http:
        before = await ql_image(database.dsn())
        path = f"/api/v3/projects/{seed.project_p}/runs/{seed.runs_p[0]}/cancellation"
        body = json.dumps({"schema": "qinglong/run-cancellation@v1", "mutationId": "m-415"}).encode()
        reply = await user_call(
            http, shell, "POST", path, token=seed.operator.token, body=body, content_type="text/plain"
        )
        assert (reply.status, reply.code) == (415, "request.unsupported_media_type"), reply
        assert image_diff(before, await ql_image(database.dsn())) == {"security_audit": 1}
        rows = await audit_rows(database.dsn(), "user.runs.cancel")
        assert [(r["decision"], r["reason"]) for r in rows] == [("allow", "ok")]


async def test_oversized_user_body_is_413_after_the_audit(
    pki: Pki, shell: Shell, seed: Seed, database: PgDatabase
) -> None:
    path = f"/api/v3/projects/{seed.project_p}/runs/{seed.runs_p[0]}/cancellation"
    body = _padded({"schema": "qinglong/run-cancellation@v1", "mutationId": "big"}, 5 * 1024)
    async with user_http(pki) as http:
        before = await ql_image(database.dsn())
        reply = await user_call(http, shell, "POST", path, token=seed.operator.token, body=body)
        assert (reply.status, reply.code) == (413, "request.too_large"), reply
        headers = {"Authorization": f"Bearer {seed.operator.token}", "Content-Type": "application/json"}
        async with http.post(shell.user_url + path, data=_chunks(body), headers=headers) as resp:
            assert resp.status == 413
        assert image_diff(before, await ql_image(database.dsn())) == {"security_audit": 2}


async def test_artifact_upload_cap(pki: Pki, shell: Shell, seed: Seed, database: PgDatabase) -> None:
    """Uploads have their own, larger cap (1.5 MiB): a body past it is 413 and writes nothing."""
    async with WorkerClient(shell, seed.worker_a, pki.client_context(pki.worker_a)) as client:
        offered = await _running(client)
        before = await ql_image(database.dsn())
        body = _padded({"schema": "qinglong/remote-run-completion@v1", **offered.fence()}, 1536 * 1024 + 1)
        reply = await client.post(f"/offers/{offered.offer_id}/artifacts", body)
        assert (reply.status, reply.code) == (413, "request.too_large"), reply
        assert image_diff(before, await ql_image(database.dsn())) == {}
        # Well under it, a real upload is stored.
        reply = await client.upload(offered, b"x" * (64 * 1024))
        assert reply.status == 200 and reply.json()["receipt"]["size"] == 64 * 1024, reply
