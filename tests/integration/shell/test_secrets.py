"""Secrets never leak (docs/architecture.md §4, §6, §8): after a full Worker round trip and user calls against
a cluster that logs every statement with its bind parameters, neither PostgreSQL's log nor any log
record of the process holds a raw lease token (in any encoding), the session key, a ql3w signature
or a bearer token. Only SHA-256 digests cross into the database: the lease token's digest may appear
in PostgreSQL's log as a bind parameter, never in the shell's log.
Touches: a fresh database on the private cluster and its log file; loopback ports; log handlers.
"""

from __future__ import annotations

import base64
import hashlib
import json

import pytest

from qinglong.shell.db import Database
from tests.conftest import Database as PgDatabase
from tests.integration.shell.conftest import (
    Logs,
    Pki,
    PrivateCluster,
    WorkerClient,
    b64url_decode,
    seed_database,
    serve_shell,
    user_call,
    user_http,
    worker_round_trip,
)

pytestmark = pytest.mark.db


def _encodings(secret: str) -> dict[str, str]:
    """A base64url secret as text, and its bytes as hex, base64 and base64url (padded or not)."""
    raw = b64url_decode(secret)
    return {
        "text": secret,
        "hex": raw.hex(),
        "base64": base64.b64encode(raw).decode(),
        "base64 unpadded": base64.b64encode(raw).decode().rstrip("="),
        "base64url padded": base64.urlsafe_b64encode(raw).decode(),
        "base64 of the text": base64.b64encode(secret.encode()).decode().rstrip("="),
    }


def _leaks(text: str, secrets: dict[str, str]) -> list[str]:
    lowered = text.lower()
    return [name for name, value in secrets.items() if value in text or (value.isalnum() and value.lower() in lowered)]


async def test_no_secret_reaches_a_log(
    pki: Pki, private_cluster: PrivateCluster, private_database: PgDatabase, logs: Logs
) -> None:
    cluster = private_cluster.cluster
    log_offset = cluster.log_file.stat().st_size
    seed = seed_database(private_database.dsn(), pki)
    async with (
        serve_shell(Database(private_database.runtime_dsn), pki) as shell,
        WorkerClient(shell, seed.worker_a, pki.client_context(pki.worker_a)) as worker,
        user_http(pki) as http,
    ):
        trip = await worker_round_trip(worker, renewals=3)
        run = trip.offered.offer["runId"]
        for subject in (seed.operator, seed.viewer, seed.agent):
            reply = await user_call(
                http, shell, "GET", f"/api/v3/projects/{seed.project_p}/runs/{run}", token=subject.token
            )
            assert reply.status == 200, reply
        reply = await user_call(
            http,
            shell,
            "POST",
            f"/api/v3/projects/{seed.project_p}/runs/{seed.runs_p[1]}/cancellation",
            token=seed.operator.token,
            body={"schema": "qinglong/run-cancellation@v1", "mutationId": "leak-check"},
        )
        assert reply.status == 202, reply

    token = trip.offered.token
    assert worker.session_key_text is not None
    secrets: dict[str, str] = {}
    for name, value in _encodings(token).items():
        secrets[f"lease token ({name})"] = value
    for name, value in _encodings(worker.session_key_text).items():
        secrets[f"session key ({name})"] = value
    for n, header in enumerate(worker.authorizations):
        secrets[f"ql3w signature #{n}"] = header.rsplit("sig=", 1)[1]
    for n, bearer in enumerate(seed.bearer_tokens):
        secrets[f"bearer token #{n}"] = bearer
    token_digest = hashlib.sha256(token.encode("ascii")).hexdigest()
    bearer_digest = hashlib.sha256(seed.operator.token.encode()).hexdigest()
    assert len(worker.authorizations) == 8  # pull, 2 ACKs, 3 renewals, upload, completion (open is unsigned)

    pg_log = cluster.log_file.read_bytes()[log_offset:].decode("utf-8", "replace")
    # The log is live (statements and their bind parameters are there), so an absence means something.
    # PostgreSQL 17 capitalises the detail ("Parameters: $1 = …"; 15: "parameters: …").
    assert "ql_api.attempt_lease_control_v2" in pg_log and "parameters: $1 = " in pg_log.lower()
    assert token_digest in pg_log.lower()  # allowed: only the digest crossed, as a bind parameter
    assert bearer_digest in pg_log.lower()
    assert _leaks(pg_log, secrets) == []

    events = [json.loads(line) for line in logs.shell.lines]
    assert any(e["event"] == "request" and e["route"] == "worker.lease_control" for e in events), logs.shell.lines
    shell_log = logs.shell.text
    assert _leaks(shell_log, secrets) == []
    assert _leaks(shell_log, {"lease token digest": token_digest, "bearer digest": bearer_digest}) == []
    # Nor any other log record of the process (aiohttp's access log, asyncio, psycopg's pool, …).
    assert _leaks(logs.everything.text, secrets) == []
    assert _leaks(logs.everything.text, {"lease token digest": token_digest, "bearer digest": bearer_digest}) == []
