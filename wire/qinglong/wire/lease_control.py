"""qinglong/remote-worker-lease-control@v1: renew a Lease, carry stop requests. Touches nothing: declarations.

The request: the full fence with the Offer id and the version the Worker expects (request ≤ 8 KiB), and
`running: true` when the renewal takes the running ACK along (the process exists: a starting Attempt becomes
running in the same transaction, docs/decisions/0031); absent, it is a plain renewal, as a Worker of the previous
release sends it. The answer is ql_api.attempt_lease_control_v2's result, ≤ 4 KiB, one class per status with
exactly the keys the function builds: `renewed` (stopReason and cancelRequestedAtMs are present and null),
`stop_requested` (both set) or `terminal`. It never echoes the token or its digest.
`check_lease_version` is the receiver's rule (decision 0000 (ADR-0118 §1), restated in
docs/decisions/0000-seed-records.md): a renewed or stop_requested version is exactly expectedVersion +
1.
"""

from __future__ import annotations

from typing import Final, Literal

from qinglong.wire.codec import KIB, MAX_SAFE_INTEGER, VERSION_MISMATCH, WireError
from qinglong.wire.common import (
    CANCEL_REASONS,
    ENDED_ATTEMPT_STATUSES,
    ERROR_CODE,
    RUN_STATUSES,
    TIME_MS,
    AttemptFence,
    CancelReason,
    EndedAttemptStatus,
    RunStatus,
)
from qinglong.wire.fields import Bool, Enum, Int, Message, Null, Uuid, Variants, wire

LEASE_CONTROL_SCHEMA: Final = "qinglong/remote-worker-lease-control@v1"


class LeaseControlRequest(AttemptFence):
    """Body of a lease-control call: the fence, the Offer and the Lease version the Worker holds; `running` when
    it also acknowledges that the process exists (sent only then: a shell of the previous release refuses it)."""

    SCHEMA = LEASE_CONTROL_SCHEMA
    CAP = 8 * KIB

    offer_id: str = wire(Uuid())
    expected_version: int = wire(Int(1, MAX_SAFE_INTEGER - 1))
    running: bool | None = wire(Bool(), optional=True, default=None)


class LeaseRenewed(Message):
    """The Lease was renewed (version +1, times from the database) and nobody asked to stop."""

    SCHEMA = LEASE_CONTROL_SCHEMA
    CAP = 4 * KIB

    status: Literal["renewed"] = wire(Enum(("renewed",)), default="renewed")
    lease_version: int = wire(Int(1))
    renewed_at_ms: int = wire(TIME_MS)
    expires_at_ms: int = wire(TIME_MS)
    deadline_at_ms: int | None = wire(TIME_MS, nullable=True)
    stop_reason: None = wire(Null(), default=None)
    cancel_requested_at_ms: None = wire(Null(), default=None)


class LeaseStopRequested(Message):
    """The Lease was renewed, and the Run carries a durable cancel intent: stop, then complete."""

    SCHEMA = LEASE_CONTROL_SCHEMA
    CAP = 4 * KIB

    status: Literal["stop_requested"] = wire(Enum(("stop_requested",)), default="stop_requested")
    lease_version: int = wire(Int(1))
    renewed_at_ms: int = wire(TIME_MS)
    expires_at_ms: int = wire(TIME_MS)
    deadline_at_ms: int | None = wire(TIME_MS, nullable=True)
    stop_reason: CancelReason = wire(Enum(CANCEL_REASONS))
    cancel_requested_at_ms: int = wire(TIME_MS)


class LeaseTerminal(Message):
    """The Attempt already ended by completion: its exact terminal projection (stop locally, isolate)."""

    SCHEMA = LEASE_CONTROL_SCHEMA
    CAP = 4 * KIB

    status: Literal["terminal"] = wire(Enum(("terminal",)), default="terminal")
    run_status: RunStatus = wire(Enum(RUN_STATUSES))
    attempt_status: EndedAttemptStatus = wire(Enum(ENDED_ATTEMPT_STATUSES))
    exit_code: int | None = wire(Int(0, 255), nullable=True)
    error_code: str | None = wire(ERROR_CODE, nullable=True)
    ended_at_ms: int = wire(TIME_MS)


LeaseControlResponse = LeaseRenewed | LeaseStopRequested | LeaseTerminal
LEASE_CONTROL_RESPONSES: Final[Variants[LeaseControlResponse]] = Variants(
    LeaseRenewed, LeaseStopRequested, LeaseTerminal
)


def check_lease_version(response: LeaseControlResponse, *, expected_version: int) -> LeaseControlResponse:
    """Refuse a renewed or stop_requested answer whose leaseVersion is not expectedVersion + 1."""
    if isinstance(response, LeaseRenewed | LeaseStopRequested) and response.lease_version != expected_version + 1:
        raise WireError(VERSION_MISMATCH, "leaseVersion is not expectedVersion + 1")
    return response


def parse_lease_control_response(data: bytes, *, expected_version: int | None = None) -> LeaseControlResponse:
    """Parse a lease-control answer (≤ 4 KiB); with `expected_version`, also apply check_lease_version."""
    response = LEASE_CONTROL_RESPONSES.parse(data)
    if expected_version is not None:
        check_lease_version(response, expected_version=expected_version)
    return response


MESSAGES: Final[tuple[type[Message], ...]] = (
    LeaseControlRequest,
    LeaseRenewed,
    LeaseStopRequested,
    LeaseTerminal,
)
