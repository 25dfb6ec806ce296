"""qinglong/run-timeline@v1: one Run and its event history, for the CLI and the user API. Touches nothing.

No request body. The answer is ql_api.run_timeline_v1's `found` result: the Run's projection and its
first 256 events, each event's payload as the canonical text of its JSON object.
"""

from __future__ import annotations

from typing import Final, Literal

from qinglong.wire.codec import KIB
from qinglong.wire.common import CANCEL_REASONS, RUN_STATUSES, TIME_MS, CancelReason, RunStatus
from qinglong.wire.fields import Bool, Enum, Int, List, Message, Nested, Record, Str, Uuid, wire

TIMELINE_SCHEMA: Final = "qinglong/run-timeline@v1"
ACTOR_KINDS: Final = ("user", "agent", "system", "worker", "reconciler")


class RunProjection(Record):
    """The Run as it stands."""

    run_id: str = wire(Uuid())
    project_id: str = wire(Uuid())
    task_id: str = wire(Uuid())
    task_revision_id: str = wire(Uuid())
    status: RunStatus = wire(Enum(RUN_STATUSES))
    version: int = wire(Int(1))
    event_sequence: int = wire(Int(0))
    attempt_count: int = wire(Int(0, 100))
    cancel_requested_at_ms: int | None = wire(TIME_MS, nullable=True)
    cancel_reason: CancelReason | None = wire(Enum(CANCEL_REASONS), nullable=True)
    created_at_ms: int = wire(TIME_MS)
    ended_at_ms: int | None = wire(TIME_MS, nullable=True)


class TimelineEvent(Record):
    """One event of the Run's append-only history."""

    sequence: int = wire(Int(1))
    type: str = wire(Str(64, min_len=3, pattern=r"[a-z_]+\.[a-z_]+"))
    actor_kind: str = wire(Enum(ACTOR_KINDS))
    attempt_id: str | None = wire(Uuid(), nullable=True)
    occurred_at_ms: int = wire(TIME_MS)
    payload: str = wire(Str(2048, min_len=2))


class RunTimeline(Message):
    """The Run and its first 256 events (truncated says whether there are more)."""

    SCHEMA = TIMELINE_SCHEMA
    CAP = 128 * KIB

    status: Literal["found"] = wire(Enum(("found",)), default="found")
    run: RunProjection = wire(Nested(RunProjection))
    events: tuple[TimelineEvent, ...] = wire(List(Nested(TimelineEvent), max_items=256))
    truncated: bool = wire(Bool())


MESSAGES: Final[tuple[type[Message], ...]] = (RunTimeline,)
