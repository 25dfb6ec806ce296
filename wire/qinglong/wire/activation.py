"""qinglong/remote-run-activation@v1: starting / running / start-failure ACKs. Touches nothing: declarations.

The phase and the Offer id come from the path, the fence from the body (start-failure adds its
errorCode). The answer is ql_api.attempt_activation_v1's result: a status and the exact
ql.attempt_snapshot projection, ≤ 16 KiB, never the token or its digest (decision 0000 (ADR-0112 §1), restated in
docs/decisions/0000-seed-records.md). The snapshot carries the Run's cancel intent; `not_started` means
a starting ACK found an intent and ended the Attempt: nothing may be spawned.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

from qinglong.wire.codec import KIB
from qinglong.wire.common import (
    ATTEMPT_STATUSES,
    CANCEL_REASONS,
    ERROR_CODE,
    MAX_INT32,
    RUN_STATUSES,
    TIME_MS,
    ArtifactReceipt,
    AttemptFence,
    AttemptStatus,
    CancelReason,
    RunStatus,
)
from qinglong.wire.fields import Enum, Int, List, Message, Nested, Record, Uuid, wire

ACTIVATION_SCHEMA: Final = "qinglong/remote-run-activation@v1"

Phase = Literal["starting", "running", "start-failure"]  # the last segment of an activation route's path
PHASES: Final[tuple[Phase, ...]] = get_args(Phase)
ActivationStatus = Literal["applied", "not_started", "already_starting", "already_running", "already_terminal"]


class ActivationRequest(AttemptFence):
    """Body of a starting or running ACK."""

    SCHEMA = ACTIVATION_SCHEMA
    CAP = 4 * KIB


class ActivationStartFailureRequest(AttemptFence):
    """Body of a start-failure ACK: the fence and why the process could not start."""

    SCHEMA = ACTIVATION_SCHEMA
    CAP = 4 * KIB

    error_code: str = wire(ERROR_CODE)


class Executor(Record):
    """The executor revision the Run's pinned plan runs on."""

    kind: Literal["process"] = wire(Enum(("process",)))
    version: int = wire(Int(1, MAX_INT32))


class Snapshot(Record):
    """ql.attempt_snapshot: identities, statuses, versions, times, executor, ≤ 1 artifact per kind."""

    project_id: str = wire(Uuid())
    run_id: str = wire(Uuid())
    attempt_id: str = wire(Uuid())
    offer_id: str = wire(Uuid())
    attempt_no: int = wire(Int(1, 100))
    run_status: RunStatus = wire(Enum(RUN_STATUSES))
    attempt_status: AttemptStatus = wire(Enum(ATTEMPT_STATUSES))
    attempt_version: int = wire(Int(1))
    lease_generation: int = wire(Int(1))
    lease_version: int = wire(Int(1))
    lease_expires_at_ms: int = wire(TIME_MS)
    callback_sequence: int = wire(Int(0, MAX_INT32))
    deadline_at_ms: int | None = wire(TIME_MS, nullable=True)
    started_at_ms: int | None = wire(TIME_MS, nullable=True)
    running_at_ms: int | None = wire(TIME_MS, nullable=True)
    ended_at_ms: int | None = wire(TIME_MS, nullable=True)
    exit_code: int | None = wire(Int(0, 255), nullable=True)
    error_code: str | None = wire(ERROR_CODE, nullable=True)
    cancel_requested_at_ms: int | None = wire(TIME_MS, nullable=True)
    cancel_reason: CancelReason | None = wire(Enum(CANCEL_REASONS), nullable=True)
    executor: Executor = wire(Nested(Executor))
    artifacts: tuple[ArtifactReceipt, ...] = wire(List(Nested(ArtifactReceipt), max_items=2))


class ActivationResponse(Message):
    """The ACK's outcome with the exact snapshot."""

    SCHEMA = ACTIVATION_SCHEMA
    CAP = 16 * KIB

    status: ActivationStatus = wire(Enum(get_args(ActivationStatus)))
    snapshot: Snapshot = wire(Nested(Snapshot))


MESSAGES: Final[tuple[type[Message], ...]] = (
    ActivationRequest,
    ActivationStartFailureRequest,
    ActivationResponse,
)
