"""The TCP fault proxy between one Worker and the shell's worker port (asyncio, loopback): loses an answer
after the shell committed, cuts it midway, stalls it, or resets the connection before the request reaches
the shell. Touches: loopback ports and the connections it relays."""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from tests.support.chaos.config import ChaosConfig


@dataclass
class ProxyStats:
    connections: int = 0
    requests: int = 0  # requests on established connections (the ones a fault may hit)
    lost_answers: int = 0
    cut_answers: int = 0
    stalls: int = 0
    resets: int = 0
    answered_at: list[float] = field(default_factory=list)  # wall time of each answer relayed whole


class FaultProxy:
    """TCP between one Worker and the shell's worker port. The TLS stream is opaque here, so a
    request is a run of client→server bytes and its answer the server→client bytes that follow.
    Only requests from the third exchange of a connection on are faulted: the first two carry the
    TLS handshake and the session tickets the server sends after it, so an answer seen from then
    on is the shell's HTTP answer, written after its transaction committed."""

    def __init__(self, target_port: int, config: ChaosConfig, rng: random.Random) -> None:
        self.target_port = target_port
        self.cfg = config
        self.rng = rng
        self.stats = ProxyStats()
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.ensure_future(self._connection(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _pick(self) -> str | None:
        c, x = self.cfg, self.rng.random()
        for name, p in (("lose", c.p_lose_answer), ("cut", c.p_cut_answer), ("stall", c.p_stall), ("reset", c.p_reset)):
            if x < p:
                return name
            x -= p
        return None

    async def _connection(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        self.stats.connections += 1
        try:
            sreader, swriter = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            cwriter.close()
            return
        state: dict[str, Any] = {"last": None, "exchange": 0, "fault": None}
        done = asyncio.Event()

        def abort(reset: bool) -> None:
            if reset:
                sock = cwriter.get_extra_info("socket")
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            cwriter.transport.abort()
            swriter.transport.abort()
            done.set()

        async def client_to_server() -> None:
            while True:
                data = await creader.read(65536)
                if not data:
                    with contextlib.suppress(OSError):
                        swriter.write_eof()
                    return
                if state["last"] != "c":
                    state["last"] = "c"
                    state["exchange"] += 1
                    state["fault"] = None
                    if state["exchange"] >= 3:
                        self.stats.requests += 1
                        state["fault"] = self._pick()
                        if state["fault"] == "reset":  # the shell never sees this request
                            self.stats.resets += 1
                            abort(reset=True)
                            return
                swriter.write(data)
                await swriter.drain()

        async def server_to_client() -> None:
            while True:
                data = await sreader.read(65536)
                if not data:
                    with contextlib.suppress(OSError):
                        cwriter.write_eof()
                    return
                fault = None
                if state["last"] != "s":
                    state["last"] = "s"
                    fault, state["fault"] = state["fault"], None
                    if state["exchange"] >= 3:
                        self.stats.answered_at.append(time.time())
                if fault == "lose":  # the shell answered, so it committed: the answer never arrives
                    self.stats.lost_answers += 1
                    abort(reset=False)
                    return
                if fault == "cut":  # part of the answer, then the link drops
                    self.stats.cut_answers += 1
                    cwriter.write(data[: max(1, len(data) // 2)])
                    with contextlib.suppress(OSError, ConnectionError):
                        await asyncio.wait_for(cwriter.drain(), 1)
                    abort(reset=False)
                    return
                if fault == "stall":
                    self.stats.stalls += 1
                    await asyncio.sleep(self.rng.uniform(*self.cfg.stall_s))
                cwriter.write(data)
                await cwriter.drain()

        pumps = [asyncio.ensure_future(client_to_server()), asyncio.ensure_future(server_to_client())]
        try:
            waiter = asyncio.ensure_future(done.wait())
            pending: set[asyncio.Future[Any]] = {*pumps, waiter}
            while pumps[0] in pending or pumps[1] in pending:
                finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                if waiter in finished:
                    break
            waiter.cancel()
        except (OSError, ConnectionError):
            pass
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            for w in (cwriter, swriter):
                with contextlib.suppress(Exception):
                    w.close()
