"""qinglong/run-cancellation@v1: a user asks to cancel a Run. Touches nothing: declarations.

The body is the idempotency key only (callers cannot choose a reason). The answer is
ql_api.run_cancel_request_v1's result, one class per status with its exact shape: `accepted` (202, this
call wrote the intent: reason user, the Run not ended), `already_requested` (200, an intent of any
reason exists, the Run not ended) or `already_terminal` (200; the Run ended, with or without an intent,
so cancelRequestedAtMs and reason may be null). Fences, denials and not-found travel as
qinglong/error@v1.
"""

from __future__ import annotations

from typing import Final, Literal

from qinglong.wire.codec import KIB
from qinglong.wire.common import (
    CANCEL_REASONS,
    ENDED_RUN_STATUSES,
    OPEN_RUN_STATUSES,
    TIME_MS,
    CancelReason,
    EndedRunStatus,
    OpenRunStatus,
)
from qinglong.wire.fields import Enum, Message, Str, Uuid, Variants, wire

CANCELLATION_SCHEMA: Final = "qinglong/run-cancellation@v1"
MUTATION_ID_PATTERN: Final = "[A-Za-z0-9._:-]{1,128}"


class CancellationRequest(Message):
    """Body of a cancellation: the caller's mutation id (1..128 of [A-Za-z0-9._:-])."""

    SCHEMA = CANCELLATION_SCHEMA
    CAP = 4 * KIB

    mutation_id: str = wire(Str(128, min_len=1, pattern=MUTATION_ID_PATTERN))


class CancellationAccepted(Message):
    """This call wrote the Run's cancel intent."""

    SCHEMA = CANCELLATION_SCHEMA
    CAP = 4 * KIB

    status: Literal["accepted"] = wire(Enum(("accepted",)), default="accepted")
    run_id: str = wire(Uuid())
    run_status: OpenRunStatus = wire(Enum(OPEN_RUN_STATUSES))
    cancel_requested_at_ms: int = wire(TIME_MS)
    reason: Literal["user"] = wire(Enum(("user",)))


class CancellationAlreadyRequested(Message):
    """The Run already carried a cancel intent (user, timeout or a system reason)."""

    SCHEMA = CANCELLATION_SCHEMA
    CAP = 4 * KIB

    status: Literal["already_requested"] = wire(Enum(("already_requested",)), default="already_requested")
    run_id: str = wire(Uuid())
    run_status: OpenRunStatus = wire(Enum(OPEN_RUN_STATUSES))
    cancel_requested_at_ms: int = wire(TIME_MS)
    reason: CancelReason = wire(Enum(CANCEL_REASONS))


class CancellationAlreadyTerminal(Message):
    """The Run had already ended; its intent, if it ever had one."""

    SCHEMA = CANCELLATION_SCHEMA
    CAP = 4 * KIB

    status: Literal["already_terminal"] = wire(Enum(("already_terminal",)), default="already_terminal")
    run_id: str = wire(Uuid())
    run_status: EndedRunStatus = wire(Enum(ENDED_RUN_STATUSES))
    cancel_requested_at_ms: int | None = wire(TIME_MS, nullable=True)
    reason: CancelReason | None = wire(Enum(CANCEL_REASONS), nullable=True)


CancellationResponse = CancellationAccepted | CancellationAlreadyRequested | CancellationAlreadyTerminal
CANCELLATION_RESPONSES: Final[Variants[CancellationResponse]] = Variants(
    CancellationAccepted, CancellationAlreadyRequested, CancellationAlreadyTerminal
)


def parse_cancellation_response(data: bytes) -> CancellationResponse:
    """Parse a cancellation answer (≤ 4 KiB) into its status class."""
    return CANCELLATION_RESPONSES.parse(data)


MESSAGES: Final[tuple[type[Message], ...]] = (
    CancellationRequest,
    CancellationAccepted,
    CancellationAlreadyRequested,
    CancellationAlreadyTerminal,
)
