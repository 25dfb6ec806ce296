"""Worker ingress TLS (docs/architecture.md §6, §8): TLS 1.3 only, a client certificate signed by the worker
CA required at the handshake, and the certificate's worker id must be the path's.

Every refused attempt sends a session open for Worker A (which writes a session row when accepted)
and proves that no HTTP response came back and that no row of `ql` changed.
Touches: a fresh database, the in-process shell on loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl

import pytest

from qinglong.shell.tls import worker_identity
from tests.conftest import Database as PgDatabase
from tests.integration.shell.conftest import (
    JSON,
    SESSION_SCHEMA,
    Pki,
    Seed,
    Shell,
    WorkerClient,
    image_diff,
    ql_image,
)

pytestmark = pytest.mark.db


def _open_request(worker_id: str) -> bytes:
    body = json.dumps({"schema": SESSION_SCHEMA, "capacity": 1, "workerGeneration": 1}).encode()
    head = (
        f"POST /api/v3/workers/{worker_id}/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: {JSON}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


async def _exchange(port: int, ctx: ssl.SSLContext, request: bytes) -> tuple[str, bytes]:
    """("handshake", b"") when the handshake itself failed; else ("after", bytes read) where the read
    ended by an error or EOF: a refused client sees no byte of an HTTP response either way."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1"), 10
        )
    except (ssl.SSLError, ConnectionError):
        return "handshake", b""
    received = b""
    try:
        writer.write(request)
        await writer.drain()
        while chunk := await asyncio.wait_for(reader.read(65536), 10):
            received += chunk
    except (ssl.SSLError, ConnectionError):
        pass
    finally:
        writer.close()
        with contextlib.suppress(ssl.SSLError, ConnectionError):
            await writer.wait_closed()
    return "after", received


async def test_valid_certificate_reaches_the_pipeline(pki: Pki, shell: Shell, seed: Seed) -> None:
    """The control for the refusals below: the same raw exchange with Worker A's certificate answers."""
    outcome, data = await _exchange(shell.worker_port, pki.client_context(pki.worker_a), _open_request(seed.worker_a))
    assert outcome == "after" and data.startswith(b"HTTP/1.1 200 "), data[:200]


async def test_tls12_client_is_refused_at_the_handshake(
    pki: Pki, shell: Shell, seed: Seed, database: PgDatabase
) -> None:
    before = await ql_image(database.dsn())
    ctx = pki.client_context(pki.worker_a, min_version=ssl.TLSVersion.TLSv1_2, max_version=ssl.TLSVersion.TLSv1_2)
    outcome, data = await _exchange(shell.worker_port, ctx, _open_request(seed.worker_a))
    assert (outcome, data) == ("handshake", b"")
    # The user API is TLS 1.3 only as well.
    user_ctx = pki.client_context(min_version=ssl.TLSVersion.TLSv1_2, max_version=ssl.TLSVersion.TLSv1_2)
    outcome, data = await _exchange(shell.user_port, user_ctx, b"GET /openapi.json HTTP/1.1\r\n\r\n")
    assert (outcome, data) == ("handshake", b"")
    assert image_diff(before, await ql_image(database.dsn())) == {}


@pytest.mark.parametrize("who", ["no certificate", "untrusted CA"])
async def test_client_without_a_trusted_certificate_is_refused(
    who: str, pki: Pki, shell: Shell, seed: Seed, database: PgDatabase
) -> None:
    """TLS 1.3 reports a refused client certificate after the client's Finished: accept a failed
    handshake or a connection that ends with an alert/EOF, but never an HTTP response or a write."""
    before = await ql_image(database.dsn())
    ctx = pki.client_context(None if who == "no certificate" else pki.rogue_a)
    outcome, data = await _exchange(shell.worker_port, ctx, _open_request(seed.worker_a))
    assert data == b"", (outcome, data[:200])
    assert image_diff(before, await ql_image(database.dsn())) == {}


async def test_another_workers_certificate_on_this_workers_path(
    pki: Pki, shell: Shell, seed: Seed, database: PgDatabase
) -> None:
    async with (
        WorkerClient(shell, seed.worker_a, pki.client_context(pki.worker_a)) as a,
        WorkerClient(shell, seed.worker_a, pki.client_context(pki.worker_b)) as b_as_a,
    ):
        assert (await a.open()).status == 200
        before = await ql_image(database.dsn())
        # Worker B (valid certificate) opens a session on A's path …
        reply = await b_as_a.open()
        assert (reply.status, reply.code) == (401, "auth.certificate_mismatch"), reply
        # … or replays A's session with A's (stolen) session key: the certificate still decides.
        b_as_a.session_id, b_as_a.key = a.session_id, a.key
        reply = await b_as_a.post("/heartbeat", {"schema": SESSION_SCHEMA, "workerGeneration": 1})
        assert (reply.status, reply.code) == (401, "auth.certificate_mismatch"), reply
        assert image_diff(before, await ql_image(database.dsn())) == {}
        # Control: A's own heartbeat is accepted (and writes the session's new expiry).
        reply = await a.post("/heartbeat", {"schema": SESSION_SCHEMA, "workerGeneration": 1})
        assert reply.status == 200 and reply.json()["status"] == "alive", reply


async def test_the_peer_certificate_is_read_once_per_connection(
    pki: Pki, shell: Shell, seed: Seed, database: PgDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """qinglong.shell.app keeps a connection's worker identity with its TLS object: one keep-alive connection
    reads its certificate once however many requests it carries; every new connection reads its own, so
    another Worker's certificate on a new connection is still refused on this Worker's path."""
    from qinglong.shell import app

    read: list[str | None] = []

    def counting(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> tuple[str, bytes] | None:
        identity = worker_identity(ssl_object)
        read.append(identity[0] if identity else None)
        return identity

    monkeypatch.setattr(app, "worker_identity", counting)
    heartbeat = {"schema": SESSION_SCHEMA, "workerGeneration": 1}
    async with WorkerClient(shell, seed.worker_a, pki.client_context(pki.worker_a)) as a:
        assert (await a.open()).status == 200
        for _ in range(3):
            reply = await a.post("/heartbeat", heartbeat)
            assert reply.status == 200 and reply.json()["status"] == "alive", reply
        assert read == [seed.worker_a]
    async with WorkerClient(shell, seed.worker_a, pki.client_context(pki.worker_b)) as b_as_a:
        b_as_a.session_id, b_as_a.key = a.session_id, a.key
        before = await ql_image(database.dsn())
        for _ in range(2):
            reply = await b_as_a.post("/heartbeat", heartbeat)
            assert (reply.status, reply.code) == (401, "auth.certificate_mismatch"), reply
        assert image_diff(before, await ql_image(database.dsn())) == {}
        assert read == [seed.worker_a, seed.worker_b]
