"""Connection budgets (qinglong.shell.config.Budget) for each of the shell's listeners: its own listening
sockets, a count of its open connections, and one deadline per connection. Touches the network (the
sockets it binds and accepts), the process's RLIMIT_NOFILE, the shell's metrics and its log.

Why not web.TCPSite or loop.create_server(ssl=…): asyncio wraps every accepted socket in a TLS transport
(a 256 KiB read buffer, then the handshake) before any protocol factory could refuse it. Here the accept
loop closes a connection beyond max_connections at once, before any TLS, and starts the handshakes of the
others within the handshake budget (below).

Why a RequestHandler subclass (_Connection): aiohttp 3.14 bounds one header line (max_line_size,
max_field_size) and the header count (max_headers), and has one keep-alive timer that covers both an
idle connection and an unfinished head. It has no header, body or total-head budget. The subclass keeps
one loop.call_at deadline per connection, moved as a request progresses (header → body → none while the
handler runs → idle → header …), so no task or timer piles up per request. It refuses a head that does
not end within max_header_bytes before aiohttp's parser buffers it, and answers every error of aiohttp's
own parser in qinglong/error@v1 and closes (handle_error): 431 request.header_too_large for a header
limit, 400 request.malformed for anything else that does not parse (Content-Length with
Transfer-Encoding included; a chunk that breaks inside a body being read fails that read instead, see
_feed). It reads one private attribute, `_messages` (the queue of parsed requests), to see a head
complete. aiohttp is pinned (3.14.5); tests/integration/shell/test_budgets.py exercises
every budget.

Memory under floods (docs/decisions/0027-shell-memory-under-floods.md): each TLS connection gets asyncio's own
TLS protocol (asyncio.sslproto.SSLProtocol, a module asyncio does not export; its constructor has not changed
from 3.11 to 3.13) with a 32 KiB read buffer instead of 256 KiB, built here and handed to
loop.connect_accepted_socket as the protocol of a plain transport, as asyncio itself does with ssl=. At most
max_handshakes handshakes are under way on a listener, and max_handshakes_per_source from one source (an IPv4
address, an IPv6 /64); a connection accepted beyond them waits (_Handshakes: a socket and its accept time, no
TLS state) until a handshake ends, the sources taking turns, or until its tls_handshake_timeout. A failed
handshake's exception holds the frames that hold the connection (its buffers, its OpenSSL object) in reference
cycles that only a full garbage collection frees; _connect clears those frames and calls the aiohttp protocol's
connection_lost (which drops its parser, another cycle), so the connection is freed at once. The reclaimer
(one per process) runs gc.collect() and glibc's malloc_trim(0) when many connections ended in RECLAIM_EVERY_S,
and once more after, so that the memory a flood took goes back to the system.
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import errno
import gc
import ipaddress
import logging
import resource
import socket
import ssl
import time
import traceback
from asyncio import sslproto
from collections.abc import Callable
from typing import Any, Final

from aiohttp import hdrs, web
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong
from aiohttp.http_parser import RawRequestMessage
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestPayloadError
from aiohttp.web_request import BaseRequest

from qinglong.shell.app import HANDLER_ARGS, unrouted
from qinglong.shell.config import Budget, ConfigError, ShellConfig
from qinglong.shell.metrics import BUDGET_HITS, CONNECTIONS_ACCEPTED, CONNECTIONS_OPEN
from qinglong.wire.logline import emit

log = logging.getLogger("qinglong.shell")

FD_SPARE: Final = 64  # stdio, listening sockets, log files, resolver sockets, a connection being refused
BACKLOG: Final = 128
ACCEPT_RETRY_S: Final = 1.0  # after EMFILE/ENFILE/ENOBUFS/ENOMEM, as asyncio's own accept loop does
HEAD_TOO_LARGE: Final = "the head is over the listener's header budget"
TLS_READ_BUFFER: Final = 32 * 1024  # asyncio's is 256 KiB, allocated and zeroed for every connection
RECLAIM_EVERY_S: Final = 10.0
RECLAIM_AFTER: Final = 64  # connections ended since the last pass: a flood (or a busy minute)


def ensure_fd_limit(config: ShellConfig) -> int:
    """Raise the soft RLIMIT_NOFILE to what the budgets need (every listener's max_connections, the
    database pool and FD_SPARE); ConfigError when the hard limit is lower. Returns the soft limit."""
    listeners = (config.worker, config.user, config.admin)
    need = sum(listener.budget.max_connections for listener in listeners) + config.pool_size + FD_SPARE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return soft
    if hard != resource.RLIM_INFINITY and hard < need:
        raise ConfigError(
            f"the connection budgets need {need} open files (max_connections of every listener + pool_size + "
            f"{FD_SPARE}) but RLIMIT_NOFILE's hard limit is {hard}: lower max_connections or raise the limit"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    return need


class BudgetedListener:
    """One listener: its listening sockets, the aiohttp Server answering on them, and its budget."""

    def __init__(self, name: str, server: web.Server, budget: Budget, ssl_context: ssl.SSLContext | None) -> None:
        self.name = name
        self.budget = budget
        self.open = 0  # accepted and not yet closed, TLS handshakes included
        self.loop = asyncio.get_running_loop()
        self._server = server
        self.ssl_context = ssl_context  # what the next accepted connection gets (a SIGHUP reload replaces it)
        self._sockets: list[socket.socket] = []
        self._handshakes: set[asyncio.Task[None]] = set()
        self._shakes = _Handshakes(budget)
        self._sweeper: asyncio.TimerHandle | None = None  # closes waiting connections at tls_handshake_timeout
        # aiohttp's own keep-alive timer only backs ours up: it never fires first.
        self.handler_kwargs: Final[dict[str, Any]] = {
            "keepalive_timeout": budget.idle_timeout + budget.header_timeout + 1.0,
            "max_line_size": budget.max_header_bytes,
            "max_field_size": budget.max_header_bytes,
            "max_headers": budget.max_header_count,
            "access_log": None,
            **HANDLER_ARGS,
        }

    @property
    def ports(self) -> list[int]:
        return [int(sock.getsockname()[1]) for sock in self._sockets]

    async def start(self, host: str, port: int, *, reuse_port: bool = False) -> None:
        """Bind every address `host` resolves to (OSError when one cannot be bound) and start accepting.
        `reuse_port`: SO_REUSEPORT, so that the processes of one shell (qinglong.shell.processes) bind the
        same port and the kernel spreads the connections among them."""
        infos = await self.loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        try:
            for family, kind, proto, _, address in dict.fromkeys(infos):
                sock = socket.socket(family, kind, proto)
                self._sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if reuse_port:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
                sock.listen(BACKLOG)
                sock.setblocking(False)
        except OSError:
            await self.stop()
            raise
        for sock in self._sockets:
            self.loop.add_reader(sock.fileno(), self._accept, sock)
        RECLAIMER.attach(self.loop)

    async def stop(self) -> None:
        """Stop accepting and abandon the TLS handshakes under way (open connections are the Server's)."""
        if self._sockets:
            RECLAIMER.detach()
        for sock in self._sockets:
            if sock.fileno() >= 0:
                self.loop.remove_reader(sock.fileno())
            sock.close()
        self._sockets.clear()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for sock in self._shakes.drain():
            sock.close()
            self.released()
        for task in list(self._handshakes):
            task.cancel()
        await asyncio.gather(*self._handshakes, return_exceptions=True)

    def hit(self, budget: str) -> None:
        """A connection was refused or closed by `budget`: count it, and log it (at most once a minute)."""
        BUDGET_HITS.labels(self.name, budget).inc()
        level = logging.INFO if budget == "idle_timeout" else logging.WARNING
        emit(log, level, "listener.budget_hit", key=f"budget:{self.name}:{budget}", listener=self.name,
             budget=budget, open=self.open, max_connections=self.budget.max_connections)  # fmt: skip

    def released(self) -> None:
        self.open -= 1
        CONNECTIONS_OPEN.labels(self.name).dec()
        RECLAIMER.ended += 1

    def _accept(self, listening: socket.socket) -> None:
        for _ in range(BACKLOG):
            try:
                sock, address = listening.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:
                self.hit("open_files" if exc.errno in (errno.EMFILE, errno.ENFILE) else "accept_error")
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self.loop.remove_reader(listening.fileno())
                    self.loop.call_later(ACCEPT_RETRY_S, self._resume, listening)
                return
            if self.open >= self.budget.max_connections:
                sock.close()  # at once: no TLS, no buffers, nothing queued
                self.hit("max_connections")
                continue
            sock.setblocking(False)
            self.open += 1
            CONNECTIONS_OPEN.labels(self.name).inc()
            CONNECTIONS_ACCEPTED.labels(self.name).inc()
            source, now = _source(address), self.loop.time()
            over = None if self.ssl_context is None else self._shakes.over(source)
            if over is None:
                self._start(sock, source, now)
            else:  # its ClientHello waits in the kernel's socket buffer; the socket alone costs this process nothing
                self._shakes.wait(sock, source, now)
                self.hit(over)
                if self._sweeper is None:
                    self._sweeper = self.loop.call_at(now + self.budget.tls_handshake_timeout, self._sweep)

    def _start(self, sock: socket.socket, source: str, accepted: float) -> None:
        connection = _Connection(self, self._server, loop=self.loop, **self.handler_kwargs)
        if self.ssl_context is not None:
            self._shakes.begin(source)
        task = self.loop.create_task(self._connect(sock, connection, source, accepted))
        self._handshakes.add(task)
        task.add_done_callback(self._handshakes.discard)

    def _admit(self) -> None:
        """Start the handshakes of waiting connections while the budget has room (round robin over sources)."""
        while (waiting := self._shakes.next()) is not None:
            sock, source, accepted = waiting
            if self.loop.time() - accepted >= self.budget.tls_handshake_timeout:
                self._expire_waiting(sock)
            else:
                self._start(sock, source, accepted)

    def _sweep(self) -> None:
        """Close the waiting connections that reached tls_handshake_timeout while waiting."""
        self._sweeper = None
        for sock in self._shakes.expired(self.loop.time() - self.budget.tls_handshake_timeout):
            self._expire_waiting(sock)
        oldest = self._shakes.oldest()
        if oldest is not None:
            self._sweeper = self.loop.call_at(oldest + self.budget.tls_handshake_timeout, self._sweep)

    def _expire_waiting(self, sock: socket.socket) -> None:
        sock.close()
        self.hit("tls_handshake_timeout")
        self.released()

    def _resume(self, listening: socket.socket) -> None:
        if listening in self._sockets:
            self.loop.add_reader(listening.fileno(), self._accept, listening)

    async def _connect(self, sock: socket.socket, connection: _Connection, source: str, accepted: float) -> None:
        if self.ssl_context is None:
            try:
                await self.loop.connect_accepted_socket(_given(connection), sock)
            except BaseException:  # cancelled by stop(), an OSError, or a bug: the slot is given back either way
                connection.connection_lost(None)
                raise
            return
        timeout = accepted + self.budget.tls_handshake_timeout - self.loop.time()  # counted from accept
        done = self.loop.create_future()
        tls = _TLS(self.loop, connection, self.ssl_context, done, True, ssl_handshake_timeout=timeout)  # type: ignore[arg-type]  # typeshed says int; asyncio takes seconds as a float
        raw: asyncio.Transport | None = None
        try:
            raw, _ = await self.loop.connect_accepted_socket(_given(tls), sock)
            await done  # the handshake: SSLProtocol calls connection.connection_made at its end
        except OSError as exc:  # ssl.SSLError and TimeoutError are OSErrors; SSLProtocol closed the socket
            _forget(exc)
            if self.loop.time() - accepted >= self.budget.tls_handshake_timeout:
                self.hit("tls_handshake_timeout")
            connection.connection_lost(None)  # its slot back; aiohttp drops the parser that holds it in a cycle
        except BaseException:  # cancelled by stop(), or a bug: the slot is given back either way
            if raw is not None:
                raw.abort()
            connection.connection_lost(None)
            raise
        else:
            if connection.transport is None:  # the connection was lost before the handshake ended
                connection.connection_lost(None)
        finally:
            self._shakes.end(source)
            if self._sockets:  # not stopping
                self._admit()


class _Handshakes:
    """The handshake budget of one TLS listener: how many handshakes are under way, from which source, and
    the accepted connections waiting for their turn, by source. The sources take turns (dict order: a source
    served goes to the back), so a flooding source delays others by one handshake at most each round."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.under_way = 0
        self.by_source: dict[str, int] = {}
        self.waiting: dict[str, collections.deque[tuple[socket.socket, float]]] = {}

    def over(self, source: str) -> str | None:
        """The budget a new connection from `source` must wait for, if any. A source with connections waiting
        is at its share or the listener full: whatever ends first admits the waiting ones (BudgetedListener._admit)
        before any newer one."""
        if self.under_way >= self.budget.max_handshakes:
            return "max_handshakes"
        if self.by_source.get(source, 0) >= self.budget.max_handshakes_per_source:
            return "max_handshakes_per_source"
        return None

    def begin(self, source: str) -> None:
        self.under_way += 1
        self.by_source[source] = self.by_source.get(source, 0) + 1

    def end(self, source: str) -> None:
        self.under_way -= 1
        left = self.by_source.pop(source) - 1
        if left:
            self.by_source[source] = left

    def wait(self, sock: socket.socket, source: str, accepted: float) -> None:
        self.waiting.setdefault(source, collections.deque()).append((sock, accepted))

    def next(self) -> tuple[socket.socket, str, float] | None:
        """The next waiting connection the budget has room for, taken off its queue."""
        if self.under_way >= self.budget.max_handshakes:
            return None
        for source in self.waiting:  # at most max_handshakes / max_handshakes_per_source sources are full
            if self.by_source.get(source, 0) < self.budget.max_handshakes_per_source:
                queue = self.waiting.pop(source)
                sock, accepted = queue.popleft()
                if queue:
                    self.waiting[source] = queue  # to the back
                return sock, source, accepted
        return None

    def expired(self, before: float) -> list[socket.socket]:
        """Take the waiting connections accepted before `before` off their queues."""
        out = []
        for source in list(self.waiting):
            queue = self.waiting[source]
            while queue and queue[0][1] <= before:
                out.append(queue.popleft()[0])
            if not queue:
                del self.waiting[source]
        return out

    def oldest(self) -> float | None:
        return min((queue[0][1] for queue in self.waiting.values()), default=None)

    def drain(self) -> list[socket.socket]:
        out = [sock for queue in self.waiting.values() for sock, _ in queue]
        self.waiting.clear()
        return out


class _Connection(web.RequestHandler):
    """aiohttp's RequestHandler plus the header, body, idle and total-head budgets (see the module)."""

    __slots__ = (
        "_body",
        "_deadline",
        "_deadline_budget",
        "_head",
        "_in_flight",
        "_listener",
        "_released",
        "_tail",
    )

    def __init__(self, listener: BudgetedListener, manager: web.Server, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._listener = listener
        self._deadline: asyncio.TimerHandle | None = None
        self._deadline_budget = ""
        self._head = 0  # bytes received of a head not yet complete
        self._tail = b""  # its last 3 bytes, to find a CRLF CRLF split between reads
        self._body: StreamReader | None = None  # the last parsed request's body, while it is still arriving
        self._in_flight = 0  # requests parsed and not yet answered
        self._released = False

    def release(self) -> None:
        """Give the connection's slot back (once) and drop its deadline."""
        self._disarm()
        if not self._released:
            self._released = True
            self._listener.released()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._arm("header_timeout")  # the first head counts from the end of the handshake

    def connection_lost(self, exc: BaseException | None) -> None:
        self.release()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._body is not None or not data or self.transport is None:
            self._feed(data)
            return
        if self._head == 0 and self._deadline_budget != "header_timeout":
            self._arm("header_timeout")  # a later head counts from its first byte
        room = self._listener.budget.max_header_bytes - self._head
        if b"\r\n\r\n" not in self._tail + data[:room]:  # the head does not end within its budget here
            if len(data) > room:
                self._refuse_head("max_header_bytes")  # before the parser buffers a byte of it
                return
            self._head += len(data)
            self._tail = (self._tail + data)[-3:]
        self._feed(data)

    def _feed(self, data: bytes) -> None:
        queued = len(self._messages)
        super().data_received(data)
        parsed = len(self._messages) - queued
        if not parsed or self.transport is None:
            return
        if self._body is not None and not isinstance(self._messages[-1][0], RawRequestMessage):
            # aiohttp's parser failed inside the body it was delivering (a chunk that does not parse): it queued
            # a 400 for later and left that body open, and no budget would end it.
            if self._in_flight == 0:  # the request was answered (aiohttp drains the rest of its body): close
                self.force_close()
                return
            # Its reader fails now and the body ends (nothing is drained after the answer): the pipeline
            # answers request.malformed and closes, so the queued 400 is never sent.
            self._body.set_exception(RequestPayloadError("the body's framing does not parse"))
            self._body.feed_eof()
            return
        self._in_flight += parsed
        self._head, self._tail = 0, b""
        payload = self._messages[-1][1]
        if payload.is_eof():
            self._disarm()  # the handler has the whole request: no budget while it works
        else:
            self._body = payload
            self._arm("body_timeout")
            payload.on_eof(self._body_done)

    def handle_error(
        self, request: BaseRequest, status: int = 500, exc: BaseException | None = None, message: str | None = None
    ) -> web.StreamResponse:
        """aiohttp's answer to a request it could not parse (status 400) or whose handler failed, in
        qinglong/error@v1, closing the connection: 431 when a head budget was the reason. Neither the
        request nor aiohttp's message is logged (an unparsed line may hold a token)."""
        if request.writer.output_size > 0:  # as aiohttp's own: a response is half sent, the connection is broken
            raise ConnectionError("a response was already being written")
        budget = _head_budget(exc)
        if budget is not None:
            self._listener.hit(budget)
            answer = unrouted("request.header_too_large", HEAD_TOO_LARGE)
        elif status == 400:
            answer = unrouted("request.malformed", "the request does not parse")
        else:  # a bug in a handler or a middleware (the pipeline answers its own): the type only, as it does
            emit(log, logging.ERROR, "internal_error", listener=self._listener.name, error=type(exc).__name__)
            answer = unrouted("internal.error", "internal error")
        answer.force_close()
        return answer

    async def finish_response(
        self, request: BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        finished = await super().finish_response(request, resp, start_time)
        self._in_flight -= 1
        if self._in_flight == 0 and self._head == 0 and self._body is None and self.transport is not None:
            self._arm("idle_timeout")
        return finished

    def _body_done(self) -> None:
        self._body = None
        if self._deadline_budget == "body_timeout":
            self._disarm()

    def _refuse_head(self, budget: str) -> None:
        self._listener.hit(budget)
        if self.transport is not None and self._in_flight == 0:  # no earlier response is being written
            self.transport.write(_raw(unrouted("request.header_too_large", HEAD_TOO_LARGE)))
        self.force_close()  # close() flushes what was written, TLS included

    def _arm(self, budget: str) -> None:
        self._disarm()
        seconds: float = getattr(self._listener.budget, budget)
        self._deadline_budget = budget
        self._deadline = self._loop.call_at(self._loop.time() + seconds, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._deadline_budget = ""

    def _expire(self) -> None:
        budget = self._deadline_budget
        self._deadline, self._deadline_budget = None, ""
        self._listener.hit(budget)
        self.force_close()


def _raw(response: web.Response) -> bytes:
    """A closing HTTP/1.1 answer's bytes, for a connection aiohttp has not parsed a request of."""
    assert isinstance(response.body, bytes)
    head = (
        f"HTTP/1.1 {response.status} {response.reason}\r\nContent-Type: {response.headers[hdrs.CONTENT_TYPE]}\r\n"
        f"Content-Length: {len(response.body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("ascii") + response.body


def _head_budget(exc: BaseException | None) -> str | None:
    """The budget a parse error of aiohttp's stands for, if any."""
    if isinstance(exc, LineTooLong):  # one line longer than max_header_bytes (aiohttp's line limits)
        return "max_header_bytes"
    if isinstance(exc, BadHttpMessage) and "Too many headers" in exc.message:
        return "max_header_count"
    return None


class _TLS(sslproto.SSLProtocol):
    """asyncio's TLS protocol with a smaller read buffer (the module's docstring)."""

    max_size = TLS_READ_BUFFER


def _given(protocol: asyncio.BaseProtocol) -> Callable[[], asyncio.BaseProtocol]:
    """connect_accepted_socket's protocol factory for a protocol made already. Not a lambda in _connect: that
    would make its locals closure cells, which keep a failed connection in a cycle with _connect's frame."""
    return lambda: protocol


def _forget(exc: BaseException) -> None:
    """Clear the finished frames of a failed handshake's traceback: their locals (SSLProtocol, the exception
    itself) form cycles that would keep the connection's buffers and OpenSSL object until a full collection."""
    traceback.clear_frames(exc.__traceback__)
    exc.__traceback__ = None


def _source(address: Any) -> str:
    """The key a handshake is counted under: an IPv4 address, or an IPv6 address's /64 (one host's usual
    allotment)."""
    host = str(address[0]) if isinstance(address, tuple) and address else str(address)
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if ip.version == 6:
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def _malloc_trim() -> Callable[[], object] | None:
    """glibc's malloc_trim(0), or None where the C library has none (musl)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


class _Reclaimer:
    """Hands back the memory of ended connections: every RECLAIM_EVERY_S, when at least RECLAIM_AFTER
    connections ended since the last pass (and once more at the next tick when any did, so that the end of a
    flood is reclaimed too), a full garbage collection then malloc_trim(0). One per process, ticking while
    any listener runs. The objects that exist when the first listener starts (modules, the applications,
    the pool) are frozen (gc.freeze) until the last one stops: a full collection then scans only what
    connections and requests made since, which keeps a pass to a few milliseconds."""

    def __init__(self) -> None:
        self.ended = 0  # connections ended since the last pass (listeners add)
        self.passes = 0
        self._listeners = 0
        self._trailing = False
        self._timer: asyncio.TimerHandle | None = None
        self._trim = _malloc_trim()

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._listeners += 1
        if self._timer is None:
            gc.freeze()  # what the shell built to serve lives as long as it: no collection need scan it again
            self._timer = loop.call_later(RECLAIM_EVERY_S, self._tick, loop)

    def detach(self) -> None:
        self._listeners -= 1
        if self._listeners <= 0 and self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._listeners = 0
            gc.unfreeze()  # a process that serves again (the tests) collects its earlier objects as usual

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = loop.call_later(RECLAIM_EVERY_S, self._tick, loop)
        if self.ended >= RECLAIM_AFTER or (self._trailing and self.ended):
            self.ended = 0
            self._trailing = True
            self.reclaim()
        else:
            self._trailing = False

    def reclaim(self) -> None:
        before = _rss_mib()
        started = time.perf_counter()
        freed = gc.collect()
        collected = time.perf_counter()
        if self._trim is not None:
            self._trim()
        ended = time.perf_counter()
        self.passes += 1
        emit(log, logging.INFO, "listener.memory_reclaimed", key="listener.memory_reclaimed", objects=freed,
             gc_ms=round((collected - started) * 1000, 1), trim_ms=round((ended - collected) * 1000, 1),
             rss_mib_before=before, rss_mib_after=_rss_mib())  # fmt: skip


def _rss_mib() -> float | None:
    """This process's resident set, in MiB (Linux /proc), for the log."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return round(int(statm.read().split()[1]) * resource.getpagesize() / 2**20, 1)
    except (OSError, ValueError, IndexError):
        return None


RECLAIMER: Final = _Reclaimer()
