"""qinglong/remote-run-activation@v1: starting / running / start-failure ACKs. Touches nothing: declarations.

The phase and the Offer id come from the path, the fence from the body (start-failure adds its
errorCode, one of qinglong.wire.reasons.START_FAILURES, and optionally its errorMessage, which the database keeps
on the Attempt). The answer is ql_api.attempt_activation_v2's result (v1's): a status and the exact
ql.attempt_snapshot projection, ≤ 16 KiB, never the token or its digest (decision 0000 (ADR-0112 §1), restated in
docs/decisions/0000-seed-records.md). The snapshot carries the Run's cancel intent; `not_started` means
a starting ACK found an intent (or a secret its plan names was deleted) and ended the Attempt: nothing may be
spawned. The answer to a starting ACK (first or replayed) of a plan that names secrets carries `secrets`: the
values of the versions the Attempt received, opened by the shell (docs/decisions/0015-secrets.md). The Worker
starts nothing unless every secret its plan names is there.
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
    SECRET_NAME_PATTERN,
    SECRET_REFS_MAX,
    SECRET_VALUE_MAX_BYTES,
    TIME_MS,
    ArtifactReceipt,
    AttemptFence,
    AttemptStatus,
    CancelReason,
    RunStatus,
)
from qinglong.wire.fields import Base64Bytes, Enum, Int, List, Message, Nested, Record, Str, Uuid, wire
from qinglong.wire.reasons import MESSAGE_MAX, START_FAILURES

ACTIVATION_SCHEMA: Final = "qinglong/remote-run-activation@v1"

Phase = Literal["starting", "running", "start-failure"]  # the last segment of an activation route's path
PHASES: Final[tuple[Phase, ...]] = get_args(Phase)
ActivationStatus = Literal["applied", "not_started", "already_starting", "already_running", "already_terminal"]


class ActivationRequest(AttemptFence):
    """Body of a starting or running ACK."""

    SCHEMA = ACTIVATION_SCHEMA
    CAP = 4 * KIB


class ActivationStartFailureRequest(AttemptFence):
    """Body of a start-failure ACK: the fence and why the process could not start: a code of the catalogue
    (qinglong.wire.reasons.START_FAILURES) and, optionally, the Worker's own short message (a Worker of an earlier
    release sends none)."""

    SCHEMA = ACTIVATION_SCHEMA
    CAP = 4 * KIB

    error_code: str = wire(Enum(tuple(START_FAILURES)))
    error_message: str | None = wire(Str(MESSAGE_MAX, min_len=1), optional=True, default=None)


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


class DeliveredSecret(Record):
    """One secret the Attempt received: its name, the version chosen at the starting ACK, and its value."""

    name: str = wire(Str(64, min_len=1, pattern=SECRET_NAME_PATTERN))
    version: int = wire(Int(1))
    value: bytes = wire(Base64Bytes(SECRET_VALUE_MAX_BYTES, min_bytes=1), secret=True)


class ActivationResponse(Message):
    """The ACK's outcome with the exact snapshot, and the secrets a starting ACK delivers."""

    SCHEMA = ACTIVATION_SCHEMA
    CAP = 16 * KIB + SECRET_REFS_MAX * 88 * KIB  # the snapshot, and 16 secrets of 64 KiB in base64 with their names

    status: ActivationStatus = wire(Enum(get_args(ActivationStatus)))
    snapshot: Snapshot = wire(Nested(Snapshot))
    secrets: tuple[DeliveredSecret, ...] | None = wire(
        List(Nested(DeliveredSecret), max_items=SECRET_REFS_MAX), optional=True, default=None
    )


MESSAGES: Final[tuple[type[Message], ...]] = (
    ActivationRequest,
    ActivationStartFailureRequest,
    ActivationResponse,
)
