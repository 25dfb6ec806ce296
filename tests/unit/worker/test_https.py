"""The Worker's HTTP/1.1 transport (worker/https.py) against a TLS 1.3 server on loopback that answers with the
exact bytes each test gives: what it refuses (compressed, chunked, no or repeated Content-Length, over the cap,
a head too long, not HTTP), that one connection carries call after call, that `Connection: close`, a peer that
closed and a call abandoned mid-way each cost a new connection, and that a broken answer is a transport failure.
Touches: tmp_path (a CA, the server's and a client's certificates), a loopback port, this process's event loop.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from qinglong.cli import pki
from qinglong.worker.https import Connection, MalformedAnswer, TransportFailure

OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


@dataclass
class Server:
    """Answers each request on a connection with the next of `answers` (then closes it when told to)."""

    answers: list[bytes]
    port: int = 0
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    close_after: bool = False
    hold: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(
                    b"content-length:"))  # fmt: skip
                self.requests.append(head + await reader.readexactly(length))
                answer = self.answers.pop(0)
                if answer == b"HOLD":
                    await self.hold.wait()
                    return
                writer.write(answer)
                await writer.drain()
                if self.close_after:
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()


@pytest.fixture
async def tls(tmp_path: Path) -> AsyncIterator[tuple[ssl.SSLContext, ssl.SSLContext]]:
    pki.init_ca(tmp_path)
    server = pki.issue_server(tmp_path, ["127.0.0.1"])
    worker = pki.issue_worker(tmp_path, "00000000-0000-4000-8000-000000000009")
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    server_ctx.load_cert_chain(server.certificate, server.key)
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    client_ctx.load_verify_locations(cafile=tmp_path / "ca.crt")
    client_ctx.load_cert_chain(worker.certificate, worker.key)
    yield server_ctx, client_ctx


async def serve(ctx: ssl.SSLContext, server: Server) -> asyncio.Server:
    listening = await asyncio.start_server(server.handle, "127.0.0.1", 0, ssl=ctx)
    server.port = listening.sockets[0].getsockname()[1]
    return listening


async def call(conn: Connection, cap: int = 1024, timeout_s: float = 5.0) -> tuple[int, bytes]:
    answer = await conn.post("/x", b'{"a":1}', {"Content-Type": "application/json"}, timeout_s=timeout_s, cap=cap)
    return answer.status, answer.body


async def test_one_connection_carries_call_after_call(tls: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    server = Server([OK, b"HTTP/1.1 409 Conflict\r\nContent-Length: 3\r\nX-Thing: a\r\n\r\nabc", OK])
    listening = await serve(tls[0], server)
    opened: list[int] = []
    conn = Connection("127.0.0.1", server.port, tls[1], opened=lambda: opened.append(1))
    try:
        assert await call(conn) == (200, b"{}")
        answer = await conn.post("/y", b"", {}, timeout_s=5, cap=10)
        assert (answer.status, answer.body, answer.headers.get("x-THING")) == (409, b"abc", "a")
        assert await call(conn) == (200, b"{}")
        assert server.connections == 1 and len(opened) == 1
        first = server.requests[0].decode()
        assert first.startswith("POST /x HTTP/1.1\r\n") and f"Host: 127.0.0.1:{server.port}\r\n" in first
        assert first.endswith('Content-Length: 7\r\nContent-Type: application/json\r\n\r\n{"a":1}')
    finally:
        await conn.close()
        listening.close()


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}", "compressed"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", "chunked"),
        (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{}", "no Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}", "repeated"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -2\r\n\r\n{}", "no Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2000\r\n\r\n" + b"x" * 2000, "exceeds the cap"),
        (b"HTTP/1.1 200 OK\r\nX: " + b"y" * 20_000 + b"\r\nContent-Length: 0\r\n\r\n", "too long"),
        (b"SSH-2.0-OpenSSH\r\n\r\n", "status line"),
        (b"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n", "status line"),
        (b"HTTP/1.1 200 OK\r\nBad Header\r\nContent-Length: 0\r\n\r\n", "header line"),
    ],
)
async def test_answers_outside_the_rules_are_refused_and_the_connection_dropped(
    tls: tuple[ssl.SSLContext, ssl.SSLContext], answer: bytes, why: str
) -> None:
    server = Server([answer, OK])
    listening = await serve(tls[0], server)
    conn = Connection("127.0.0.1", server.port, tls[1])
    try:
        with pytest.raises(MalformedAnswer, match=why):
            await call(conn)
        assert await call(conn) == (200, b"{}")  # a fresh connection: nothing of the refused answer is read again
        assert server.connections == 2
    finally:
        await conn.close()
        listening.close()


async def test_a_closed_connection_is_replaced(tls: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    server = Server([OK.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1), OK, OK], close_after=False)
    listening = await serve(tls[0], server)
    conn = Connection("127.0.0.1", server.port, tls[1])
    try:
        assert await call(conn) == (200, b"{}")  # the answer said close: the next call opens anew
        assert await call(conn) == (200, b"{}")
        assert server.connections == 2
        server.close_after = True
        server.answers = [OK, OK]
        assert await call(conn) == (200, b"{}")  # the peer closes after answering ...
        await asyncio.sleep(0.1)
        assert await call(conn) == (200, b"{}")  # ... and the next call sees it closed and reconnects
        assert server.connections == 3
    finally:
        await conn.close()
        listening.close()


async def test_a_broken_or_late_answer_is_a_transport_failure(tls: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    server = Server([b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}", b"HOLD", OK], close_after=True)
    listening = await serve(tls[0], server)
    conn = Connection("127.0.0.1", server.port, tls[1])
    try:
        with pytest.raises(TransportFailure):
            await call(conn)  # 2 of 10 bytes, then the peer closed
        with pytest.raises(TimeoutError):
            await call(conn, timeout_s=0.3)  # no answer within the budget: abandoned, the connection dropped
        server.hold.set()
        assert await call(conn) == (200, b"{}")
        assert server.connections == 3
    finally:
        await conn.close()
        listening.close()
