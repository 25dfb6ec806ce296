"""The Worker's HTTP/1.1 transport: POST over one keep-alive TLS connection, and nothing else (decision 0026).
Touches the network only: the one socket it opens to the origin it is given.

The Worker needs a small part of HTTP: a POST with an exact body, and an answer with an exact Content-Length.
So this is that part over asyncio streams, in place of a general client library (which cost a Worker about
12 MiB of RSS to import, a third of it at idle):

- one connection at a time (calls wait for it in order, and the wait counts in their budget), opened on the
  first call and kept alive; closed after an answer that says `Connection: close`, after IDLE_CLOSE_S unused,
  when the peer has closed it, and after any failure or a call abandoned mid-way (its state is unknown);
- no redirects, no compression and no chunked transfer: an answer must carry exactly one Content-Length
  within the caller's cap, at most one of each header it reads, and a head within HEAD_MAX bytes;
- every failure to get an answer is a `TransportFailure` (or TimeoutError, OSError, ssl.SSLError from below);
  an answer outside these rules is a `MalformedAnswer`. Neither is retried here: the caller decides.
Standard library only; nothing happens at import or construction.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final

HEAD_MAX: Final = 16 * 1024  # status line and headers of one answer
HEADERS_MAX: Final = 64
IDLE_CLOSE_S: Final = 60.0
SINGLE: Final = frozenset({"content-length", "content-type", "content-encoding", "transfer-encoding", "connection"})


class TransportFailure(Exception):
    """No answer came (the peer closed, or the connection broke mid-answer)."""


class MalformedAnswer(Exception):
    """An answer outside what this transport accepts (its status line, head, length or encoding)."""


class Headers(Mapping[str, str]):
    """An answer's headers, names case-insensitive (kept lower-case); a repeated name keeps its first value."""

    def __init__(self, items: dict[str, str]) -> None:
        self._items = items

    def __getitem__(self, name: str) -> str:
        return self._items[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Headers
    body: bytes

    @property
    def content_type(self) -> str:
        """The media type without its parameters, lower-case ("" when absent)."""
        return (self.headers.get("content-type") or "").split(";", 1)[0].strip().lower()


class Connection:
    """One TLS connection to `host:port`, reused for call after call (module docstring)."""

    def __init__(
        self, host: str, port: int, context: ssl.SSLContext, *, opened: Callable[[], None] | None = None
    ) -> None:
        self._host, self._port, self._context = host, port, context
        self._authority = host if port == 443 else f"{host}:{port}"
        self._opened = opened
        self._lock = asyncio.Lock()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._used_at = 0.0

    async def post(self, path: str, body: bytes, headers: Mapping[str, str], *, timeout_s: float, cap: int) -> Answer:
        """One POST and its whole answer within `timeout_s` (waiting for the connection included)."""
        async with asyncio.timeout(timeout_s), self._lock:
            done = False
            try:
                reader, writer = await self._connection()
                head = [f"POST {path} HTTP/1.1", f"Host: {self._authority}", f"Content-Length: {len(body)}"]
                head += [f"{name}: {value}" for name, value in headers.items()]
                writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
                await writer.drain()
                answer, keep = await _read_answer(reader, cap)
                done = keep
                return answer
            except asyncio.IncompleteReadError:
                raise TransportFailure("the connection closed before the answer ended") from None
            except asyncio.LimitOverrunError:
                raise MalformedAnswer("the answer's head is too long") from None
            finally:
                self._used_at = time.monotonic()
                if not done:
                    self._drop()

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = self._reader, self._writer
        if reader is not None and writer is not None:
            stale = time.monotonic() - self._used_at > IDLE_CLOSE_S
            if not (stale or reader.at_eof() or writer.is_closing()):
                return reader, writer
            self._drop()
        reader, writer = await asyncio.open_connection(
            self._host, self._port, ssl=self._context, server_hostname=self._host, limit=HEAD_MAX
        )
        self._reader, self._writer = reader, writer
        if self._opened is not None:
            self._opened()
        return reader, writer

    def _drop(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.transport.abort()  # no TLS close_notify wait: nothing more is read from it

    async def close(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
            try:
                await asyncio.wait_for(writer.wait_closed(), 1.0)
            except (TimeoutError, OSError, ssl.SSLError):
                writer.transport.abort()


async def _read_answer(reader: asyncio.StreamReader, cap: int) -> tuple[Answer, bool]:
    """The answer (status, headers, body of exactly Content-Length bytes) and whether the connection stays."""
    raw = await reader.readuntil(b"\r\n\r\n")
    if len(raw) > HEAD_MAX:
        raise MalformedAnswer("the answer's head is too long")
    lines = raw[:-4].decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code = rest[:3]
    if version not in ("HTTP/1.1", "HTTP/1.0") or not (code.isdigit() and len(code) == 3 and rest[3:4] in ("", " ")):
        raise MalformedAnswer("not an HTTP/1.1 status line")
    if len(lines) - 1 > HEADERS_MAX:
        raise MalformedAnswer("too many headers")
    items: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        name = name.lower()
        if not colon or not name or name != name.strip() or " " in name:
            raise MalformedAnswer("a malformed header line")
        if name in items:
            if name in SINGLE:
                raise MalformedAnswer(f"a repeated {name} header")
            continue
        items[name] = value.strip()
    headers = Headers(items)
    if "transfer-encoding" in items:
        raise MalformedAnswer("a chunked (or otherwise transfer-encoded) answer was refused")
    if items.get("content-encoding", "identity").lower() != "identity":
        raise MalformedAnswer("a compressed answer was refused")
    length = items.get("content-length", "")
    if not (length.isdigit() and len(length) <= 12):
        raise MalformedAnswer("the answer has no Content-Length")
    if int(length) > cap:
        raise MalformedAnswer("the answer exceeds the cap")
    body = await reader.readexactly(int(length))
    keep = version == "HTTP/1.1" and items.get("connection", "").lower() != "close"
    return Answer(int(code), headers, body), keep
