"""qinglong/worker-session@v1: open a Worker session and keep it alive. Touches nothing: declarations.

Open (certificate-authenticated): the Worker sends its capacity and generation; the response is
ql_api.worker_session_open_v1's `opened` result plus the `sessionKey` the shell derives (HMAC of the
cluster secret; the database never holds it). Heartbeat: ql_api.worker_session_heartbeat_v1's `alive`
result. Other database outcomes (invalid, not_found, fenced) travel as qinglong/error@v1.
"""

from __future__ import annotations

from typing import Final, Literal

from qinglong.wire.codec import KIB
from qinglong.wire.common import TIME_MS
from qinglong.wire.fields import Enum, Int, Message, Token, Uuid, wire

SESSION_SCHEMA: Final = "qinglong/worker-session@v1"


class WorkerSessionOpenRequest(Message):
    """Body of a session open."""

    SCHEMA = SESSION_SCHEMA
    CAP = 4 * KIB

    capacity: int = wire(Int(1, 1024))
    worker_generation: int = wire(Int(1))


class WorkerSessionOpened(Message):
    """The opened session: ids, times, the replaced session (or null) and the session key."""

    SCHEMA = SESSION_SCHEMA
    CAP = 4 * KIB

    status: Literal["opened"] = wire(Enum(("opened",)), default="opened")
    session_id: str = wire(Uuid())
    worker_generation: int = wire(Int(1))
    capacity: int = wire(Int(1, 1024))
    opened_at_ms: int = wire(TIME_MS)
    expires_at_ms: int = wire(TIME_MS)
    replaced_session_id: str | None = wire(Uuid(), nullable=True)
    session_key: str = wire(Token(), from_shell=True, secret=True)


class WorkerSessionHeartbeatRequest(Message):
    """Body of a heartbeat (Worker and session ids come from the path)."""

    SCHEMA = SESSION_SCHEMA
    CAP = 4 * KIB

    worker_generation: int = wire(Int(1))


class WorkerSessionAlive(Message):
    """The heartbeat answer: the session lives until expiresAtMs."""

    SCHEMA = SESSION_SCHEMA
    CAP = 4 * KIB

    status: Literal["alive"] = wire(Enum(("alive",)), default="alive")
    session_id: str = wire(Uuid())
    expires_at_ms: int = wire(TIME_MS)


MESSAGES: Final[tuple[type[Message], ...]] = (
    WorkerSessionOpenRequest,
    WorkerSessionOpened,
    WorkerSessionHeartbeatRequest,
    WorkerSessionAlive,
)
