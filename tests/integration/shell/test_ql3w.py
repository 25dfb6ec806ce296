"""The ql3w request signature on the worker ingress (docs/architecture.md §6): a wrong key, a timestamp outside
±60 s, a body or a path other than the signed one, and a credential naming another session are 401
with a stable code, and nothing reaches the database. Each attack targets a lease-control call that
would renew a live Lease (a write) if it were accepted; the valid call at the end proves it.
Touches: a fresh database, the in-process shell on loopback.
"""

from __future__ import annotations

import json
import os
import time
import uuid

import pytest

from tests.conftest import Database as PgDatabase
from tests.integration.shell.conftest import (
    SESSION_SCHEMA,
    Offered,
    Pki,
    Seed,
    Shell,
    WorkerClient,
    image_diff,
    ql_image,
)

pytestmark = pytest.mark.db


async def _running(client: WorkerClient) -> Offered:
    assert (await client.open()).status == 200
    offered = await client.pull()
    for phase in ("starting", "running"):
        reply = await client.activate(offered, phase)
        assert reply.status == 200, reply
    return offered


async def test_bad_signatures_are_refused_without_a_write(
    pki: Pki, shell: Shell, seed: Seed, database: PgDatabase
) -> None:
    async with WorkerClient(shell, seed.worker_a, pki.client_context(pki.worker_a)) as client:
        offered = await _running(client)
        body = offered.lease_control()
        raw = json.dumps(body).encode()
        before = await ql_image(database.dsn())
        refusals = {
            "wrong key": await client.post("/lease-control", raw, key=os.urandom(32)),
            "timestamp 120 s old": await client.post("/lease-control", raw, ts=int(time.time()) - 120),
            "timestamp 120 s ahead": await client.post("/lease-control", raw, ts=int(time.time()) + 120),
            "body swapped": await client.post(
                "/lease-control",
                json.dumps({**body, "expectedVersion": 2}).encode(),
                sign_body=raw,
            ),
            "path swapped": await client.post("/lease-control", raw, sign_path=client.path("/heartbeat")),
            "method/path of another session": await client.post(
                "/lease-control",
                raw,
                sign_path=client.path("/lease-control").replace(str(client.session_id), str(uuid.uuid4())),
            ),
        }
        expected = {
            "wrong key": "auth.bad_signature",
            "timestamp 120 s old": "auth.expired_timestamp",
            "timestamp 120 s ahead": "auth.expired_timestamp",
            "body swapped": "auth.bad_signature",
            "path swapped": "auth.bad_signature",
            "method/path of another session": "auth.bad_signature",
        }
        assert {k: (r.status, r.code) for k, r in refusals.items()} == {k: (401, c) for k, c in expected.items()}
        for reply in refusals.values():
            assert reply.json()["schema"] == "qinglong/error@v1"
        assert image_diff(before, await ql_image(database.dsn())) == {}

        # Control: the same body, signed for what is sent, renews the Lease (and writes).
        reply = await client.renew(offered)
        assert reply.status == 200 and reply.json()["leaseVersion"] == 2, reply
        assert image_diff(before, await ql_image(database.dsn())) != {}


async def test_malformed_or_foreign_credentials(pki: Pki, shell: Shell, seed: Seed, database: PgDatabase) -> None:
    async with (
        WorkerClient(shell, seed.worker_a, pki.client_context(pki.worker_a)) as client,
        WorkerClient(shell, seed.worker_b, pki.client_context(pki.worker_b)) as other,
    ):
        offered = await _running(client)
        assert (await other.open()).status == 200
        raw = json.dumps(offered.lease_control()).encode()
        path = client.path("/lease-control")
        before = await ql_image(database.dsn())
        good = client.authorization(path, raw)
        cases = {
            "no header": {},
            "bearer instead": {"Authorization": "Bearer " + "a" * 43},
            "sig truncated": {"Authorization": good[:-1]},
            "worker B's session on A's path": {
                "Authorization": good.replace(str(client.session_id), str(other.session_id))
            },
            "signed by B for B's session": {
                "Authorization": other.authorization(path.replace(str(client.session_id), str(other.session_id)), raw)
            },
        }
        for name, headers in cases.items():
            reply = await client.send("POST", path, raw, {"Content-Type": "application/json", **headers})
            assert (reply.status, reply.code) == (401, "auth.bad_signature"), (name, reply)
        # A heartbeat signed with B's key for A's session (B's key, right path) is refused as well.
        reply = await client.post("/heartbeat", {"schema": SESSION_SCHEMA, "workerGeneration": 1}, key=other.key)
        assert (reply.status, reply.code) == (401, "auth.bad_signature"), reply
        assert image_diff(before, await ql_image(database.dsn())) == {}
