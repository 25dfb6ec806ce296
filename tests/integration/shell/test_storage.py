"""Storage faults (docs/architecture.md §6): with the database down every route answers 503
storage.unavailable and /healthz 503; once the same cluster is back (same data folder and port) the
same shell process serves again without a restart.

The cluster is the private one of this folder (never the session cluster the other tests share).
Touches: a fresh database on the private cluster, which this test stops and starts; loopback ports.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from qinglong.shell.db import Database
from tests.conftest import Database as PgDatabase
from tests.integration.shell.conftest import (
    SESSION_SCHEMA,
    Pki,
    PrivateCluster,
    Reply,
    WorkerClient,
    reply_of,
    seed_database,
    serve_shell,
    user_call,
    user_http,
)

pytestmark = pytest.mark.db


async def test_database_down_is_503_and_the_shell_recovers(
    pki: Pki, private_cluster: PrivateCluster, private_database: PgDatabase
) -> None:
    cluster = private_cluster.cluster
    seed = seed_database(private_database.dsn(), pki)
    db = Database(private_database.runtime_dsn, timeout=2.0)
    async with (
        serve_shell(db, pki) as shell,
        WorkerClient(shell, seed.worker_a, pki.client_context(pki.worker_a)) as worker,
        user_http(pki) as http,
        aiohttp.ClientSession() as admin,
    ):
        timeline = f"/api/v3/projects/{seed.project_p}/runs/{seed.runs_p[0]}"

        async def heartbeat() -> Reply:
            return await worker.post("/heartbeat", {"schema": SESSION_SCHEMA, "workerGeneration": 1})

        async def read() -> Reply:
            return await user_call(http, shell, "GET", timeline, token=seed.operator.token)

        async def healthz() -> Reply:
            async with admin.get(shell.admin_url + "/healthz") as resp:
                return await reply_of(resp)

        assert (await worker.open()).status == 200
        assert (await heartbeat()).status == 200
        assert (await read()).status == 200
        assert (await healthz()).status == 200

        port = cluster.port
        await asyncio.to_thread(cluster.stop)
        try:
            for name, call in (("heartbeat", heartbeat), ("timeline", read), ("heartbeat again", heartbeat)):
                reply = await call()
                assert (reply.status, reply.code) == (503, "storage.unavailable"), (name, reply)
                assert reply.json()["schema"] == "qinglong/error@v1"
            health = await healthz()
            assert health.status == 503 and health.json() == {"status": "storage_unavailable"}
        finally:
            await asyncio.to_thread(cluster.start)
        assert cluster.port == port

        # The pool reconnects on its own: within a bounded time the same shell answers 200 again.
        deadline = time.monotonic() + 20
        statuses: list[int] = []
        while True:
            reply = await heartbeat()
            statuses.append(reply.status)
            if reply.status != 503 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        assert reply.status == 200 and reply.json()["status"] == "alive", (statuses, reply)
        assert (await read()).status == 200
        health = await healthz()
        assert health.status == 200 and health.json() == {"status": "ok"}
