"""Connection budgets (docs/operations.md, "Connection budgets"), against the real `serve()` with small
budgets over real TLS 1.3 sockets: a flood beyond the user listener's max_connections is closed at once
while a Worker opens sessions and renews on its own listener; a client that never sends its ClientHello,
a slowloris head, a stalled body and an idle keep-alive connection are each closed by their timeout (and
not before it); heads over max_header_count or max_header_bytes are answered 431 and closed, heads just
within them are served; every hit is counted on the admin listener's /metrics. Then, as an operator
runs it: `qinglong shell serve` under a low RLIMIT_NOFILE raises its soft limit, refuses in one line
(exit 2) when the hard limit is too low, and names the key of every bad budget value in one line (exit 2).
Timeouts are asserted as lower bounds and generous upper ones only.

Touches: a fresh database, loopback ports chosen by the kernel (in-process shell) or by a probe (child
processes), a temporary folder, child processes it starts and stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from qinglong.shell.config import Budget, Listener, ShellConfig
from qinglong.shell.db import Database
from qinglong.shell.listener import BudgetedListener
from qinglong.shell.server import serve
from tests.conftest import Database as PgDatabase
from tests.integration.shell.conftest import (
    JSON,
    SESSION_SCHEMA,
    Pki,
    Seed,
    Shell,
    WorkerClient,
    wait_for,
    worker_round_trip,
)
from tests.support.env import free_port

pytestmark = pytest.mark.db

SMALL = Budget(
    max_connections=8,
    tls_handshake_timeout=1.0,
    header_timeout=1.0,
    body_timeout=1.0,
    idle_timeout=1.5,
    max_header_count=16,
    max_header_bytes=4096,
)
SLACK = 10.0  # a generous upper bound past a timeout, for a loaded 2-core machine
_HIT = re.compile(r'^qinglong_shell_budget_hits_total\{budget="([a-z_]+)",listener="([a-z]+)"\} ([0-9.e+]+)$', re.M)
_OPEN = re.compile(r'^qinglong_shell_connections_open\{listener="([a-z]+)"\} ([0-9.e+]+)$', re.M)


@dataclass
class Running:
    shell: Shell
    listeners: dict[str, BudgetedListener]

    async def metrics(self) -> tuple[dict[tuple[str, str], float], dict[str, float]]:
        """(budget hits by (listener, budget), open connections by listener), read from /metrics."""
        async with aiohttp.ClientSession() as http, http.get(self.shell.admin_url + "/metrics") as resp:
            text = await resp.text()
        hits = {(listener, budget): float(n) for budget, listener, n in _HIT.findall(text)}
        return hits, {listener: float(n) for listener, n in _OPEN.findall(text)}

    async def hits(self, listener: str, budget: str) -> float:
        return (await self.metrics())[0].get((listener, budget), 0.0)


@contextlib.asynccontextmanager
async def budgeted(
    database: PgDatabase, pki: Pki, *, worker: Budget = SMALL, user: Budget = SMALL
) -> AsyncIterator[Running]:
    """The shell's serve() with these budgets (admin: SMALL), every listener on a kernel-chosen port."""
    secret = os.urandom(32)
    server = (pki.server.certificate, pki.server.key)
    config = ShellConfig(
        dsn=database.runtime_dsn,
        pool_size=2,
        cluster_secret=secret,
        worker=Listener("127.0.0.1", 0, worker, *server, pki.ca),
        user=Listener("127.0.0.1", 0, user, *server),
        admin=Listener("127.0.0.1", 0, SMALL),
    )
    ready, listeners = asyncio.Event(), dict[str, BudgetedListener]()
    task = asyncio.create_task(serve(config, ready=ready, listeners=listeners))
    waiting = asyncio.create_task(ready.wait())
    await asyncio.wait({task, waiting}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    if task.done():
        task.result()  # raises what stopped it
    assert ready.is_set(), "serve() did not become ready"
    ports = {name: listener.ports[0] for name, listener in listeners.items()}
    shell = Shell(
        worker_url=f"https://127.0.0.1:{ports['worker']}",
        user_url=f"https://127.0.0.1:{ports['user']}",
        admin_url=f"http://127.0.0.1:{ports['admin']}",
        db=Database(database.runtime_dsn),  # the clients never use it
        secret=secret,
        worker_port=ports["worker"],
        user_port=ports["user"],
    )
    try:
        yield Running(shell, listeners)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _tls(port: int, ctx: ssl.SSLContext) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, ssl=ctx), 30)


async def _until_closed(reader: asyncio.StreamReader, within: float) -> bytes:
    """Everything the server sends until it closes the connection (EOF or reset)."""
    chunks: list[bytes] = []
    with contextlib.suppress(ConnectionError, ssl.SSLError):
        while chunk := await asyncio.wait_for(reader.read(65536), within):
            chunks.append(chunk)
    return b"".join(chunks)


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError, ssl.SSLError):
        await asyncio.wait_for(writer.wait_closed(), 5)


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> bytes:
    """Send one request and read one whole response (Content-Length), leaving the connection open."""
    writer.write(request)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
    length = re.search(rb"\r\ncontent-length: *([0-9]+)", head, re.I)
    assert length is not None, head
    return head + await asyncio.wait_for(reader.readexactly(int(length[1])), 30)


GET_OPENAPI = b"GET /openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


async def test_a_flood_beyond_the_user_cap_is_closed_at_once_while_a_worker_works(
    pki: Pki, database: PgDatabase, seed: Seed
) -> None:
    cap = 10
    user = dataclasses.replace(SMALL, max_connections=cap, header_timeout=120.0, idle_timeout=120.0)
    async with budgeted(database, pki, user=user) as running:
        refused_before = await running.hits("user", "max_connections")
        held = [await _tls(running.shell.user_port, pki.client_context()) for _ in range(cap)]
        assert running.listeners["user"].open == cap
        started, refused = time.monotonic(), 0
        for _ in range(2 * cap):
            try:
                _, writer = await _tls(running.shell.user_port, pki.client_context())
            except OSError:  # reset or EOF during the handshake: the shell closed it at accept
                refused += 1
            else:  # a handshake that completed would have to be a slot that was free
                await _close(writer)
        flood_seconds = time.monotonic() - started
        assert refused == 2 * cap
        assert flood_seconds < user.header_timeout  # closed at once, not by a timeout
        # The Worker's listener has its own slots: new connections open sessions and renew Leases.
        async with WorkerClient(running.shell, seed.worker_a, pki.client_context(pki.worker_a)) as client:
            trip = await worker_round_trip(client, renewals=3)
            assert trip.replies["renew2"].json()["status"] == "renewed"
        async with WorkerClient(running.shell, seed.worker_b, pki.client_context(pki.worker_b)) as client:
            assert (await client.open()).status == 200
        hits, open_now = await running.metrics()
        assert hits[("user", "max_connections")] - refused_before == 2 * cap
        assert open_now["user"] == cap and running.listeners["user"].open == cap
        for _, writer in held:
            await _close(writer)
        await wait_for(_zero_open(running, "user"), within=SLACK)


def _zero_open(running: Running, name: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return running.listeners[name].open == 0

    return check


async def test_a_client_that_never_says_hello_is_closed_by_the_handshake_timeout(
    pki: Pki, database: PgDatabase, seed: Seed
) -> None:
    async with budgeted(database, pki) as running:
        before = await running.hits("user", "tls_handshake_timeout")
        started = time.monotonic()
        reader, writer = await asyncio.open_connection("127.0.0.1", running.shell.user_port)
        assert await _until_closed(reader, 30) == b""
        waited = time.monotonic() - started
        writer.close()
        assert SMALL.tls_handshake_timeout <= waited < SMALL.tls_handshake_timeout + SLACK
        assert await running.hits("user", "tls_handshake_timeout") - before == 1
        await wait_for(_zero_open(running, "user"), within=SLACK)


async def test_a_slowloris_head_is_closed_by_the_header_timeout(pki: Pki, database: PgDatabase, seed: Seed) -> None:
    async with budgeted(database, pki) as running:
        before = await running.hits("user", "header_timeout")
        reader, writer = await _tls(running.shell.user_port, pki.client_context())
        started, sent = time.monotonic(), 0
        head = b"GET /openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"s" * 200 + b"\r\n\r\n"

        async def drip() -> None:
            nonlocal sent
            for byte in head:  # one byte every 0.3 s: the head would take over a minute
                writer.write(bytes([byte]))
                sent += 1
                await asyncio.sleep(0.3)

        dripping = asyncio.create_task(drip())
        answer = await _until_closed(reader, 60)
        waited = time.monotonic() - started
        dripping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await dripping
        assert answer == b"" and sent < len(head)
        assert SMALL.header_timeout <= waited < SMALL.header_timeout + SLACK
        assert await running.hits("user", "header_timeout") - before == 1
        await _close(writer)


def _session_open(worker_id: str, body: bytes, length: int | None = None) -> bytes:
    head = (
        f"POST /api/v3/workers/{worker_id}/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {JSON}\r\n"
        f"Content-Length: {len(body) if length is None else length}\r\n\r\n"
    )
    return head.encode()


async def test_a_stalled_body_is_closed_by_the_body_timeout(pki: Pki, database: PgDatabase, seed: Seed) -> None:
    body = json.dumps({"schema": SESSION_SCHEMA, "capacity": 1, "workerGeneration": 1}).encode()
    async with budgeted(database, pki) as running:
        port, ctx = running.shell.worker_port, pki.client_context(pki.worker_a)
        # A body that arrives in two parts within the budget is served.
        reader, writer = await _tls(port, ctx)
        writer.write(_session_open(seed.worker_a, body) + body[:10])
        await asyncio.sleep(SMALL.body_timeout / 2)
        answer = await _exchange(reader, writer, body[10:])
        assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
        await _close(writer)
        # A body that stops coming is closed: no answer.
        before = await running.hits("worker", "body_timeout")
        reader, writer = await _tls(port, ctx)
        started = time.monotonic()
        writer.write(_session_open(seed.worker_a, body, length=len(body) + 100) + body)
        answer = await _until_closed(reader, 30)
        waited = time.monotonic() - started
        assert answer == b""
        assert SMALL.body_timeout <= waited < SMALL.body_timeout + SLACK
        assert await running.hits("worker", "body_timeout") - before == 1
        await _close(writer)


async def test_an_idle_keep_alive_connection_is_closed_by_the_idle_timeout(
    pki: Pki, database: PgDatabase, seed: Seed
) -> None:
    user = dataclasses.replace(SMALL, header_timeout=1.0, idle_timeout=4.0)
    async with budgeted(database, pki, user=user) as running:
        before = await running.hits("user", "idle_timeout")
        headers_before = await running.hits("user", "header_timeout")
        reader, writer = await _tls(running.shell.user_port, pki.client_context())
        assert (await _exchange(reader, writer, GET_OPENAPI)).startswith(b"HTTP/1.1 200 ")
        # Idle longer than header_timeout but within idle_timeout: the same connection serves again.
        await asyncio.sleep(1.5)
        sent = time.monotonic()  # before the shell's idle deadline for this connection is set
        assert (await _exchange(reader, writer, GET_OPENAPI)).startswith(b"HTTP/1.1 200 ")
        assert await _until_closed(reader, 30) == b""
        waited = time.monotonic() - sent
        assert user.idle_timeout <= waited < user.idle_timeout + SLACK
        assert await running.hits("user", "idle_timeout") - before == 1
        assert await running.hits("user", "header_timeout") == headers_before
        await _close(writer)


@pytest.mark.parametrize(
    ("name", "head", "budget"),
    [
        ("too many headers", b"".join(b"X-H%d: 1\r\n" % i for i in range(20)) + b"\r\n", "max_header_count"),
        ("a whole head over the bytes", b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 1500) for i in range(3)) + b"\r\n",
         "max_header_bytes"),
        ("an unfinished head over the bytes", b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 1000) for i in range(5)),
         "max_header_bytes"),
        ("one line over the bytes", b"X-Long: " + b"v" * 5000 + b"\r\n\r\n", "max_header_bytes"),
    ],
)  # fmt: skip
async def test_a_head_over_its_budget_is_431_and_closed(
    pki: Pki, database: PgDatabase, seed: Seed, name: str, head: bytes, budget: str
) -> None:
    async with budgeted(database, pki) as running:
        before = await running.hits("user", budget)
        reader, writer = await _tls(running.shell.user_port, pki.client_context())
        writer.write(b"GET /openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\n" + head)
        answer = await _until_closed(reader, 30)
        assert re.match(rb"HTTP/1\.[01] 431 ", answer), (name, answer[:200])  # aiohttp's own answers are 1.0
        assert await running.hits("user", budget) - before == 1
        await _close(writer)
        # Just within both budgets (15 fields of 16, about 3.5 KiB of 4 KiB), a head is served.
        reader, writer = await _tls(running.shell.user_port, pki.client_context())
        fields = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 250) for i in range(14))
        request = b"GET /openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\n" + fields + b"\r\n"
        assert 3500 < len(request) < SMALL.max_header_bytes
        assert (await _exchange(reader, writer, request)).startswith(b"HTTP/1.1 200 ")
        await _close(writer)


# -- the command, as an operator runs it ----------------------------------------------------------


def _config(
    folder: Path,
    pki: Pki,
    dsn: str,
    admin_port: int = 9100,
    worker_extra: str = "",
    *,
    user_port: int | None = None,
    user_extra: str = "",
) -> Path:
    secret = folder / "cluster.secret"
    secret.write_bytes(os.urandom(32).hex().encode())
    secret.chmod(0o600)
    config = folder / "shell.toml"
    config.write_text(
        f'[database]\ndsn = "{dsn}"\n\n[secret]\ncluster_secret_file = "{secret}"\n\n'
        f'[worker_listener]\nhost = "127.0.0.1"\nport = {free_port()}\ncertificate = "{pki.server.certificate}"\n'
        f'key = "{pki.server.key}"\nclient_ca = "{pki.ca}"\n{worker_extra}\n'
        f'[user_listener]\nhost = "127.0.0.1"\nport = {user_port or free_port()}\n'
        f'certificate = "{pki.server.certificate}"\nkey = "{pki.server.key}"\n{user_extra}\n'
        f'[admin_listener]\nhost = "127.0.0.1"\nport = {admin_port}\n'
    )
    return config


SERVE = [sys.executable, "-m", "qinglong.cli", "shell", "serve", "--config"]


def test_a_hard_open_files_limit_below_the_budgets_is_one_line_and_exit_2(
    tmp_path: Path, pki: Pki, database: PgDatabase
) -> None:
    config = _config(tmp_path, pki, database.runtime_dsn)  # default budgets: 1024 + 256 + 16 + 4 + 64 files
    out = subprocess.run(["prlimit", "--nofile=64:64", *SERVE, str(config)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "RLIMIT_NOFILE" in out.stderr and "1364" in out.stderr and "64" in out.stderr, out.stderr


async def test_a_low_soft_open_files_limit_is_raised_to_what_the_budgets_need(
    tmp_path: Path, pki: Pki, database: PgDatabase
) -> None:
    admin = free_port()
    config = _config(tmp_path, pki, database.runtime_dsn, admin, worker_extra="max_connections = 100\n")
    proc = await asyncio.create_subprocess_exec(
        "prlimit", "--nofile=128:4096", *SERVE, str(config),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        async with aiohttp.ClientSession() as http:

            async def healthy() -> bool:
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"http://127.0.0.1:{admin}/healthz") as resp:
                        return resp.status == 200
                return False

            await wait_for(healthy, within=30, interval=0.1)
        limits = await asyncio.to_thread(Path(f"/proc/{proc.pid}/limits").read_text)
        soft_hard = re.search(r"^Max open files +([0-9]+) +([0-9]+)", limits, re.M)
        assert soft_hard is not None, limits
        assert (int(soft_hard[1]), int(soft_hard[2])) == (100 + 256 + 16 + 4 + 64, 4096)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()


# docs/operations.md "Connection budgets": an open TLS connection holds about 270 KiB of the shell.
PER_CONNECTION_KIB = 400  # that, a request head's buffer, and slack for the allocator
FLOOD_SLACK_MIB = 24


def _kib(pid: int, field: str) -> int:
    found = re.search(rf"^{field}:\s+([0-9]+) kB$", Path(f"/proc/{pid}/status").read_text(), re.M)
    assert found is not None, field
    return int(found[1])


async def test_a_flood_of_idle_and_slowloris_connections_keeps_the_shell_under_its_memory_bound(
    tmp_path: Path, pki: Pki, database: PgDatabase
) -> None:
    """`qinglong shell serve` as its own process, its user listener capped at 32: 16 slowloris clients (a
    head byte every 50 ms) and 400 idle TLS clients leave its peak RSS (VmHWM) within the start-up RSS + 32
    connections' worth, because every connection past the cap is closed at accept."""
    cap, admin, user = 32, free_port(), free_port()
    config = _config(
        tmp_path, pki, database.runtime_dsn, admin, user_port=user,
        user_extra=f"max_connections = {cap}\nheader_timeout = 120\nidle_timeout = 120\n",
    )  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        *SERVE, str(config), stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    held: list[asyncio.StreamWriter] = []
    try:
        async with aiohttp.ClientSession() as http:

            async def healthy() -> bool:
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"http://127.0.0.1:{admin}/healthz") as resp:
                        return resp.status == 200
                return False

            await wait_for(healthy, within=30, interval=0.1)
        base_kib = _kib(proc.pid, "VmRSS")

        async def idle() -> None:
            with contextlib.suppress(OSError, asyncio.TimeoutError):
                held.append((await _tls(user, pki.client_context()))[1])

        async def slowloris(writer: asyncio.StreamWriter) -> None:
            for byte in b"GET /openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " * 4:
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(0.05)

        # Half the slots drip a head byte by byte; then 400 idle clients arrive in waves of 50.
        dripping = [(await _tls(user, pki.client_context()))[1] for _ in range(cap // 2)]
        held += dripping
        drips = [asyncio.create_task(slowloris(w)) for w in dripping]
        for _ in range(8):
            await asyncio.gather(*(idle() for _ in range(50)))
        await asyncio.sleep(1.0)
        assert not any(d.done() for d in drips), "a slowloris client was closed before its header_timeout"
        for d in drips:
            d.cancel()
        peak_kib = _kib(proc.pid, "VmHWM")
        bound_kib = base_kib + cap * PER_CONNECTION_KIB + FLOOD_SLACK_MIB * 1024
        assert len(held) == cap  # the cap's worth got in; every other connection was closed at accept
        assert peak_kib <= bound_kib, (base_kib, peak_kib, bound_kib)
    finally:
        for writer in held:
            writer.transport.abort()
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("max_connections = 0", "worker_listener.max_connections: outside 1..100000"),
        ("tls_handshake_timeout = 0.01", "worker_listener.tls_handshake_timeout: outside 0.1..300 seconds"),
        ('header_timeout = "10"', "worker_listener.header_timeout: expected a number of seconds"),
        ("body_timeout = 3601", "worker_listener.body_timeout: outside 0.1..3600 seconds"),
        ("idle_timeout = false", "worker_listener.idle_timeout: expected a number of seconds"),
        ("max_header_count = 1025", "worker_listener.max_header_count: outside 1..1024"),
        ("max_header_bytes = 512", "worker_listener.max_header_bytes: outside 1024..1048576"),
        ("max_header_size = 512", "worker_listener: unknown field 'max_header_size'"),
    ],
)
def test_a_bad_budget_value_is_one_line_naming_the_key_and_exit_2(
    tmp_path: Path, pki: Pki, database: PgDatabase, line: str, says: str
) -> None:
    config = _config(tmp_path, pki, database.runtime_dsn, worker_extra=line + "\n")
    out = subprocess.run([*SERVE, str(config)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and says in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


async def _raw(port: int, source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A TCP connection from `source` that never says hello: it holds one handshake until the timeout."""
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


async def _tls_from(port: int, ctx: ssl.SSLContext, source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, ssl=ctx, local_addr=(source, 0)), 30)


async def test_handshakes_beyond_the_handshake_budget_wait_their_turn(
    pki: Pki, database: PgDatabase, seed: Seed
) -> None:
    user = dataclasses.replace(
        SMALL, max_connections=20, max_handshakes=3, max_handshakes_per_source=2, tls_handshake_timeout=20.0
    )
    async with budgeted(database, pki, user=user) as running:
        port, listener = running.shell.user_port, running.listeners["user"]

        async def under_way(n: int) -> bool:
            return listener._shakes.under_way == n

        per_source = await running.hits("user", "max_handshakes_per_source")
        held = [await _raw(port, "127.0.0.2") for _ in range(2)]  # 127.0.0.2 holds its share
        await wait_for(lambda: under_way(2), within=SLACK)
        waiting = asyncio.create_task(_tls_from(port, pki.client_context(), "127.0.0.2"))
        await wait_for(lambda: _more(running, "max_handshakes_per_source", per_source), within=SLACK)
        await asyncio.sleep(0.5)
        assert not waiting.done()  # its ClientHello waits in the kernel; no handshake is under way for it
        assert listener._shakes.under_way == 2 and listener.open == 3

        # Another source has room: its handshake starts and ends at once, and its request is answered.
        started = time.monotonic()
        reader, writer = await _tls_from(port, pki.client_context(), "127.0.0.1")
        assert b" 200 " in (await _exchange(reader, writer, GET_OPENAPI)).split(b"\r\n", 1)[0]
        assert time.monotonic() - started < user.tls_handshake_timeout / 2
        await _close(writer)

        # The listener full (3 under way: 2 from 127.0.0.2, 1 from 127.0.0.3): 127.0.0.1 waits as well.
        listener_full = await running.hits("user", "max_handshakes")
        held.append(await _raw(port, "127.0.0.3"))
        await wait_for(lambda: under_way(3), within=SLACK)
        second = asyncio.create_task(_tls_from(port, pki.client_context(), "127.0.0.1"))
        await wait_for(lambda: _more(running, "max_handshakes", listener_full), within=SLACK)
        await asyncio.sleep(0.5)
        assert not second.done() and not waiting.done()

        # A handshake of 127.0.0.2 ends: the waiting ones get their turns (each handshake that ends lets the
        # next one start), complete their handshakes and are served.
        _, first_held = held.pop(0)
        first_held.close()
        reader, writer = await waiting
        assert b" 200 " in (await _exchange(reader, writer, GET_OPENAPI)).split(b"\r\n", 1)[0]
        await _close(writer)
        reader, writer = await second
        assert b" 200 " in (await _exchange(reader, writer, GET_OPENAPI)).split(b"\r\n", 1)[0]
        await _close(writer)
        for _, holder in held:
            holder.close()
        await wait_for(_zero_open(running, "user"), within=SLACK)
        assert listener._shakes.under_way == 0 and listener._shakes.by_source == {} and listener._shakes.waiting == {}


async def _more(running: Running, budget: str, than: float) -> bool:
    return await running.hits("user", budget) > than
