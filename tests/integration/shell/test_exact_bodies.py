"""Exact bodies and an error body for every refusal, against the real `serve()` (its budgeted listeners,
qinglong.shell.listener) over raw TLS 1.3 sockets, so that no client library normalises a request:

- a body is `application/json` with at most `charset=utf-8` (any case) and no Content-Encoding but
  identity; gzip, deflate and br bodies are refused 415 whether their ql3w signature covers the decoded
  or the encoded bytes, and so are charset=utf-16 and any other parameter;
- an unknown path (404), another method (405, with Allow), a request line that does not parse, a
  Content-Length with a Transfer-Encoding, a chunk that does not parse (in the head's read, or while the
  handler reads the body) (400), a head over max_header_bytes or max_header_count (431) and a body over
  the cap (413) are each answered with an exact qinglong/error@v1 body (read with qinglong.wire's
  ErrorMessage) on the worker, user and admin listeners, and the connection is closed where the
  request's framing cannot be trusted; aiohttp logs nothing of them;
- none of them writes a row (the whole `ql` schema is compared before and after), but the admission
  audit row of a user route, which is written before its body is read;
- a connection that body_timeout closes while its body is read is no 500 and no internal_error: one
  `client_gone` log line, and no status counted for it.

Touches: a fresh database, loopback ports chosen by the kernel (in-process serve()), the `qinglong.shell`
logger's handlers.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import re
import ssl
import uuid
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import pytest

from qinglong.shell.config import Budget
from qinglong.shell.routes import ROUTES
from qinglong.wire import ErrorMessage
from qinglong.wire.errors import ERRORS
from qinglong.wire.logline import settled
from tests.conftest import Database as PgDatabase
from tests.integration.shell.conftest import (
    JSON,
    SESSION_SCHEMA,
    Logs,
    Offered,
    Pki,
    Seed,
    WorkerClient,
    image_diff,
    ql_image,
)
from tests.integration.shell.test_budgets import Running, budgeted

pytestmark = pytest.mark.db

BUDGET = Budget(
    max_connections=32,
    tls_handshake_timeout=10.0,
    header_timeout=10.0,
    body_timeout=1.0,
    idle_timeout=30.0,
    max_header_count=16,
    max_header_bytes=4096,
)
ENQUEUE_SCHEMA = "qinglong/run-enqueue@v1"
_COUNTER = re.compile(r"^(qinglong_shell_[a-z_]+_total)\{([^}]*)\} ([0-9.e+]+)$", re.M)


@dataclass(frozen=True)
class Answer:
    """One HTTP/1.x answer read off a raw socket, and whether the server then closed the connection."""

    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes
    closed: bool

    def error(self, code: str) -> ErrorMessage:
        """The exact error body: `code` with its table status, a request id, application/json."""
        assert (self.status, self.headers.get("content-type")) == (ERRORS[code].status, JSON), self
        message = ErrorMessage.parse(self.body)
        assert message.code == code and message.request_id, message
        return message


async def _read_answer(reader: asyncio.StreamReader) -> Answer:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {
        name.strip().lower(): value.strip() for name, value in (line.split(":", 1) for line in lines[1:] if line)
    }
    body = await asyncio.wait_for(reader.readexactly(int(headers.get("content-length", "0"))), 30)
    try:
        closed = await asyncio.wait_for(reader.read(1), 1.0) == b""
    except (ConnectionError, ssl.SSLError):
        closed = True
    except TimeoutError:
        closed = False
    return Answer(status, headers, body, closed)


async def exchange(port: int, ctx: ssl.SSLContext | None, request: bytes) -> Answer:
    """Send `request` as it is on a new connection (TLS when `ctx`) and read one answer."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, ssl=ctx), 30)
    try:
        writer.write(request)
        return await _read_answer(reader)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await asyncio.wait_for(writer.wait_closed(), 5)


def http_request(method: str, path: str, headers: dict[str, str] | list[tuple[str, str]], body: bytes = b"") -> bytes:
    fields = headers.items() if isinstance(headers, dict) else headers
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields)
    return head.encode() + b"\r\n" + body


@dataclass
class Listeners:
    """Where each listener answers, and the TLS context to reach it with (None: plain)."""

    running: Running
    pki: Pki

    def target(self, name: str) -> tuple[int, ssl.SSLContext | None]:
        if name == "admin":
            return int(self.running.shell.admin_url.rsplit(":", 1)[1]), None
        if name == "worker":
            return self.running.shell.worker_port, self.pki.client_context(self.pki.worker_a)
        return self.running.shell.user_port, self.pki.client_context()


@contextlib.asynccontextmanager
async def listeners(database: PgDatabase, pki: Pki) -> AsyncIterator[Listeners]:
    async with budgeted(database, pki, worker=BUDGET, user=BUDGET) as running:
        yield Listeners(running, pki)


async def _running_offer(client: WorkerClient) -> Offered:
    assert (await client.open()).status == 200
    offered = await client.pull()
    for phase in ("starting", "running"):
        assert (await client.activate(offered, phase)).status == 200
    return offered


def _signed(client: WorkerClient, suffix: str, body: bytes, signed_over: bytes, headers: dict[str, str]) -> bytes:
    path = client.path(suffix)
    return http_request("POST", path, {"Authorization": client.authorization(path, signed_over), **headers}, body)


async def test_encoded_bodies_are_415_whatever_the_signature_covers(pki: Pki, database: PgDatabase, seed: Seed) -> None:
    async with listeners(database, pki) as at:
        assert at.running.listeners["worker"].handler_kwargs["auto_decompress"] is False
        port, ctx = at.target("worker")
        async with WorkerClient(at.running.shell, seed.worker_a, pki.client_context(pki.worker_a)) as client:
            offered = await _running_offer(client)
            plain = json.dumps(offered.lease_control()).encode()
            encoded = {"gzip": gzip.compress(plain), "deflate": zlib.compress(plain), "br": b"\x8b\x02\x80" + plain}
            before = await ql_image(database.dsn())
            for coding, body in encoded.items():
                for signed_over in (plain, body):  # the decoded bytes, then the bytes sent
                    headers = {"Content-Type": JSON, "Content-Encoding": coding, "Content-Length": str(len(body))}
                    answer = await exchange(port, ctx, _signed(client, "/lease-control", body, signed_over, headers))
                    answer.error("request.unsupported_media_type")
            for coding in ("GZIP", "identity, gzip", ""):
                headers = {"Content-Type": JSON, "Content-Encoding": coding, "Content-Length": str(len(plain))}
                answer = await exchange(port, ctx, _signed(client, "/lease-control", plain, plain, headers))
                answer.error("request.unsupported_media_type")
            assert image_diff(before, await ql_image(database.dsn())) == {}
            # The same renewal, not encoded (or `identity`), is served: only the encoding was refused.
            for extra in ({}, {"Content-Encoding": "identity"}):
                headers = {"Content-Type": JSON, "Content-Length": str(len(plain)), **extra}
                answer = await exchange(port, ctx, _signed(client, "/lease-control", plain, plain, headers))
                assert answer.status == 200 and json.loads(answer.body)["status"] == "renewed", answer
                offered.lease_version = int(json.loads(answer.body)["leaseVersion"])
                plain = json.dumps(offered.lease_control()).encode()
            assert image_diff(before, await ql_image(database.dsn())) != {}


REFUSED_TYPES = [
    "application/json; charset=utf-16",
    "application/json; charset=UTF-16LE",
    "application/json; charset=latin-1",
    "application/json; charset=utf-8; q=1",
    "application/json; foo=bar",
    "application/json;",
    "application/json charset=utf-8",
    "application/jsonx",
    "text/json",
    "application/json-seq",
    "application/x-www-form-urlencoded",
]
ACCEPTED_TYPES = ["application/json", "Application/JSON; Charset=UTF-8", 'application/json;charset="utf-8"']


async def test_only_application_json_with_at_most_charset_utf8_is_read(
    pki: Pki, database: PgDatabase, seed: Seed
) -> None:
    async with listeners(database, pki) as at:
        port, ctx = at.target("worker")
        async with WorkerClient(at.running.shell, seed.worker_a, pki.client_context(pki.worker_a)) as client:
            assert (await client.open()).status == 200
            body = json.dumps({"schema": SESSION_SCHEMA, "workerGeneration": 1}).encode()
            length = ("Content-Length", str(len(body)))
            before = await ql_image(database.dsn())
            for content_type in REFUSED_TYPES:
                request = _signed(client, "/heartbeat", body, body, dict([("Content-Type", content_type), length]))
                (await exchange(port, ctx, request)).error("request.unsupported_media_type")
            path = client.path("/heartbeat")
            for fields, code in (
                ([length], "request.unsupported_media_type"),  # no Content-Type
                ([("Content-Type", JSON), ("Content-Type", JSON), length], "request.malformed"),  # two (aiohttp)
            ):
                request = http_request(
                    "POST", path, [("Authorization", client.authorization(path, body)), *fields], body
                )
                (await exchange(port, ctx, request)).error(code)
            assert image_diff(before, await ql_image(database.dsn())) == {}
            for content_type in ACCEPTED_TYPES:
                request = _signed(client, "/heartbeat", body, body, dict([("Content-Type", content_type), length]))
                answer = await exchange(port, ctx, request)
                assert answer.status == 200 and json.loads(answer.body)["sessionId"] == client.session_id, answer


async def test_a_user_route_refuses_an_encoded_body_after_its_audit_row_only(
    pki: Pki, database: PgDatabase, seed: Seed
) -> None:
    async with listeners(database, pki) as at:
        port, ctx = at.target("user")
        body = json.dumps({"schema": ENQUEUE_SCHEMA, "taskId": seed.task_p, "mutationId": "m-gzip"}).encode()
        for headers in (
            {"Content-Type": JSON, "Content-Encoding": "gzip"},
            {"Content-Type": "application/json; charset=utf-16"},
        ):
            before = await ql_image(database.dsn())
            zipped = gzip.compress(body) if "Content-Encoding" in headers else body
            fields = {"Authorization": f"Bearer {seed.operator.token}", **headers, "Content-Length": str(len(zipped))}
            request = http_request("POST", f"/api/v3/projects/{seed.project_p}/runs", fields, zipped)
            (await exchange(port, ctx, request)).error("request.unsupported_media_type")
            assert image_diff(before, await ql_image(database.dsn())) == {"security_audit": 1}


def _wrong_method(name: str, seed: Seed) -> tuple[str, str, set[str]]:
    """(method, path, the methods Allow must name) of a request to a served path with a method it does not take."""
    if name == "admin":
        return "POST", "/metrics", {"GET", "HEAD"}
    template = {"worker": "/api/v3/workers/{workerId}/sessions", "user": "/api/v3/projects/{project}/runs"}[name]
    path = template.format(workerId=seed.worker_a, project=seed.project_p)
    return "PUT", path, {route.method for route in ROUTES if route.path == template}


@pytest.mark.parametrize("name", ["worker", "user", "admin"])
async def test_what_no_route_answers_is_an_error_body(pki: Pki, database: PgDatabase, seed: Seed, name: str) -> None:
    async with listeners(database, pki) as at:
        port, ctx = at.target(name)
        before = await ql_image(database.dsn())
        close = {"Connection": "close"}
        for path in ("/nope", "/api/v3/workers", f"/api/v3/projects/{seed.project_p}/runs/{uuid.uuid4()}/x"):
            (await exchange(port, ctx, http_request("GET", path, close))).error("request.unknown_path")
        if name == "worker":  # a path parameter outside its pattern: no route has the path
            path = f"/api/v3/workers/{seed.worker_a}/sessions/{uuid.uuid4()}/offers/{uuid.uuid4()}/activation/done"
            (await exchange(port, ctx, http_request("POST", path, close))).error("request.unknown_path")
        method, path, allow = _wrong_method(name, seed)
        answer = await exchange(port, ctx, http_request(method, path, {**close, "Content-Length": "0"}))
        answer.error("request.method_not_allowed")
        assert set(answer.headers["allow"].split(",")) == allow
        assert image_diff(before, await ql_image(database.dsn())) == {}


def _heads(path: str) -> dict[str, tuple[bytes, str]]:
    """Requests aiohttp's parser refuses, and the code each is answered with."""
    line = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode()
    return {
        "a request line that does not parse": (b"GET /a b c HTTP/1.1\r\nHost: x\r\n\r\n", "request.malformed"),
        "a version that is not HTTP/1": (f"GET {path} HTTP/7.0\r\n\r\n".encode(), "request.malformed"),
        "not HTTP at all": (b"\x00\x01\x02 hello\r\n\r\n", "request.malformed"),
        "Content-Length with Transfer-Encoding": (
            line + b"Content-Type: application/json\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"2\r\n{}\r\n0\r\n\r\n",
            "request.malformed",
        ),
        "two Content-Lengths": (line + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}", "request.malformed"),
        "a header line without a colon": (line + b"Content-Type application/json\r\n\r\n", "request.malformed"),
        "too many headers": (line + b"".join(b"X-H%d: 1\r\n" % i for i in range(20)) + b"\r\n",
                             "request.header_too_large"),
        "one header line over the bytes": (line + b"X-Long: " + b"v" * 5000 + b"\r\n\r\n", "request.header_too_large"),
        "a head over the bytes": (
            line + b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 1500) for i in range(3)) + b"\r\n",
            "request.header_too_large",
        ),
    }  # fmt: skip


@pytest.mark.parametrize("name", ["worker", "user", "admin"])
async def test_a_request_that_does_not_parse_is_an_error_body_and_closed(
    pki: Pki, database: PgDatabase, seed: Seed, name: str, logs: Logs
) -> None:
    async with listeners(database, pki) as at:
        port, ctx = at.target(name)
        path = {
            "worker": f"/api/v3/workers/{seed.worker_a}/sessions",
            "user": f"/api/v3/projects/{seed.project_p}/runs",
        }
        before = await ql_image(database.dsn())
        for case, (request, code) in _heads(path.get(name, "/healthz")).items():
            answer = await exchange(port, ctx, request)
            message = answer.error(code)
            assert answer.closed, (case, answer)
            assert "hello" not in message.message and "vvvv" not in message.message, case  # no request bytes echoed
        assert image_diff(before, await ql_image(database.dsn())) == {}
        # Nothing of the requests is logged (aiohttp's own error log would print the line it could not parse).
        assert "Error handling request" not in logs.everything.text and "vvvv" not in logs.everything.text


async def test_a_body_over_the_cap_or_broken_in_its_chunks_is_an_error_body(
    pki: Pki, database: PgDatabase, seed: Seed, logs: Logs
) -> None:
    for route in ("unrouted", "worker.lease_control"):
        settled(f"request:{route}:400")  # refusal lines are once a minute per route and status, process-wide
    async with listeners(database, pki) as at:
        port, ctx = at.target("worker")
        async with WorkerClient(at.running.shell, seed.worker_a, pki.client_context(pki.worker_a)) as client:
            offered = await _running_offer(client)
            control = offered.lease_control()
            big = json.dumps({**control, "padding": "x" * 9000}).encode()
            before = await ql_image(database.dsn())
            headers = {"Content-Type": JSON, "Content-Length": str(len(big))}
            (await exchange(port, ctx, _signed(client, "/lease-control", big, big, headers))).error("request.too_large")
            chunked = b"".join(
                b"%x\r\n%s\r\n" % (len(big[i : i + 1000]), big[i : i + 1000]) for i in range(0, len(big), 1000)
            )
            headers = {"Content-Type": JSON, "Transfer-Encoding": "chunked"}
            request = _signed(client, "/lease-control", chunked + b"0\r\n\r\n", big, headers)
            (await exchange(port, ctx, request)).error("request.too_large")
            plain = json.dumps(control).encode()
            first, broken = b"%x\r\n%s\r\n" % (10, plain[:10]), b"zz\r\n"
            # A chunk that breaks in the same read as the head: aiohttp's parser refuses the whole request.
            answer = await exchange(port, ctx, _signed(client, "/lease-control", first + broken, plain, headers))
            answer.error("request.malformed")
            assert answer.closed
            # One that breaks while the handler reads the body: that read fails, and the pipeline answers.
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
            writer.write(_signed(client, "/lease-control", first, plain, headers))
            await asyncio.sleep(0.3)  # within body_timeout
            writer.write(broken)
            answer = await _read_answer(reader)
            writer.close()
            answer.error("request.malformed")
            assert answer.closed
            # One that breaks after the answer (415, before any byte was read) closes the connection.
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
            writer.write(_signed(client, "/lease-control", first, plain, {**headers, "Content-Type": "text/plain"}))
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
            assert head.startswith(b"HTTP/1.1 415 "), head
            writer.write(broken)
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await asyncio.wait_for(reader.read(), 30)  # the rest of the 415, then the close
            writer.close()
            assert image_diff(before, await ql_image(database.dsn())) == {}
        refused = [json.loads(line) for line in logs.shell.lines if '"status": 400' in line]
        assert [line["route"] for line in refused] == ["unrouted", "worker.lease_control"], refused
        assert "internal_error" not in logs.shell.text and "Unhandled exception" not in logs.everything.text


async def _counters(running: Running) -> dict[tuple[str, str], float]:
    """Every qinglong_shell_*_total sample of the admin listener's /metrics, by (name, labels)."""
    async with aiohttp.ClientSession() as http, http.get(running.shell.admin_url + "/metrics") as resp:
        text = await resp.text()
    return {(name, labels): float(value) for name, labels, value in _COUNTER.findall(text)}


async def test_a_body_cut_by_the_body_timeout_is_no_500(pki: Pki, database: PgDatabase, seed: Seed, logs: Logs) -> None:
    body = json.dumps({"schema": SESSION_SCHEMA, "capacity": 1, "workerGeneration": 1}).encode()
    async with listeners(database, pki) as at:
        port, ctx = at.target("worker")
        counted = await _counters(at.running)
        before = await ql_image(database.dsn())
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
        path = f"/api/v3/workers/{seed.worker_a}/sessions"
        writer.write(http_request("POST", path, {"Content-Type": JSON, "Content-Length": str(len(body) + 100)}, body))
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            assert await asyncio.wait_for(reader.read(), 30) == b""  # closed, unanswered
        writer.close()

        async def logged() -> bool:
            return "client_gone" in logs.shell.text

        deadline = asyncio.get_running_loop().time() + 10
        while not await logged():
            assert asyncio.get_running_loop().time() < deadline, logs.shell.text
            await asyncio.sleep(0.05)
        after = await _counters(at.running)
        changed = {key: after[key] - counted.get(key, 0.0) for key in after if after[key] != counted.get(key, 0.0)}
        assert changed == {("qinglong_shell_budget_hits_total", 'budget="body_timeout",listener="worker"'): 1.0}, (
            changed
        )
        assert "internal_error" not in logs.shell.text and "ConnectionResetError" not in logs.everything.text
        gone = [json.loads(line) for line in logs.shell.lines if '"client_gone"' in line]
        assert len(gone) == 1 and gone[0]["route"] == "worker.session.open", gone
        assert image_diff(before, await ql_image(database.dsn())) == {}
