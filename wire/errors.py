"""qinglong/error@v1 and the stable error codes of every non-2xx answer. Touches nothing: declarations.

A code is stable API: the shell chooses it, the Worker and users branch on it, and it never carries
a secret (the message names a rule or a field path, never a value). Database outcomes map by rule:
`fenced` + reason → `fenced.<reason>`, `invalid` + reason → `invalid.<reason>`, `not_found` →
`not_found` (a missing Offer and one of another Worker look the same, as they must), except that
ql.policy_fence's `approval_required` is the code `approval_required` (docs/architecture.md §6: 403 for agents).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from qinglong.wire.codec import BAD_ENUM, KIB, WIRE_CODES, WireError
from qinglong.wire.fields import Enum, Message, Str, wire

ERROR_SCHEMA: Final = "qinglong/error@v1"
REQUEST_ID_PATTERN: Final = "[A-Za-z0-9._:-]{1,128}"  # ql.security_audit.request_id is 1..128 characters

# Every `fenced` reason the ql_api functions return (ql.attempt_fence's and ql.policy_fence's included).
FENCE_REASONS: Final[tuple[str, ...]] = (
    "worker_disabled",
    "certificate_mismatch",
    "stale_session",
    "session_expired",
    "stale_generation",
    "identity_mismatch",
    "stale_lease_generation",
    "token_mismatch",
    "lease_expired",
    "state_drift",
    "stale_version",
    "completion_conflict",
    "artifact_mismatch",
    "artifact_conflict",
    "subject_disabled",
    "project_archived",
    "project_changed",
    "binding_revoked",
    "binding_changed",
    "role_insufficient",
    "approval_required",  # an agent asking run.stop: the one fence whose code is `approval_required` (403)
    "mutation_conflict",
)
# Every `invalid` reason: mostly inputs the wire parser already refuses (a bug if the database sees
# them), plus the content checks only the database makes (size, too_large, sha256_mismatch).
INVALID_REASONS: Final[tuple[str, ...]] = (
    "phase",
    "worker_id",
    "session_id",
    "worker_generation",
    "cert_fingerprint",
    "capacity",
    "token_digest",
    "project_id",
    "run_id",
    "attempt_id",
    "offer_id",
    "lease_generation",
    "expected_version",
    "lease_version",
    "exit_code",
    "error_code",
    "artifacts",
    "kind",
    "sha256",
    "size",
    "too_large",
    "sha256_mismatch",
    "subject_id",
    "task_id",
    "mutation_id",
    "admitted_version",
    "permission",
    "route",
    "request_id",
    "role",
    "active",
)

ERROR_CODES: Final[tuple[str, ...]] = (
    *(f"fenced.{reason}" for reason in FENCE_REASONS if reason != "approval_required"),
    *(f"invalid.{reason}" for reason in INVALID_REASONS),
    "auth.unauthenticated",
    "auth.bad_signature",
    "auth.expired_timestamp",
    "auth.unknown_session",
    "auth.certificate_mismatch",
    "request.too_large",
    "request.unsupported_media_type",
    "request.malformed",
    *WIRE_CODES,
    "not_found",
    "denied",
    "approval_required",
    "storage.unavailable",
    "internal.bad_projection",
    "internal.error",
)


class ErrorMessage(Message):
    """Every non-2xx body: a stable code, a short message and, when known, the request id."""

    SCHEMA = ERROR_SCHEMA
    CAP = 4 * KIB

    code: str = wire(Enum(ERROR_CODES))
    message: str = wire(Str(200, min_len=1))
    request_id: str | None = wire(Str(128, min_len=1, pattern=REQUEST_ID_PATTERN), optional=True, default=None)


def outcome_code(result: Mapping[str, object]) -> str:
    """The error code of a database outcome {"status": "invalid"|"fenced"|"not_found", "reason": …}."""
    status, reason = result.get("status"), result.get("reason")
    if status == "not_found":
        return "not_found"
    if status == "fenced" and reason == "approval_required":
        return "approval_required"
    code = f"{status}.{reason}" if status in ("invalid", "fenced") and isinstance(reason, str) else ""
    if code not in ERROR_CODES:
        raise WireError(BAD_ENUM, "database outcome has no stable error code")
    return code


def error_from_wire_error(error: WireError, *, request_id: str | None = None) -> ErrorMessage:
    """The error body for a refused request (its code is one of the wire.* codes)."""
    return ErrorMessage(code=error.code, message=error.message, request_id=request_id)


MESSAGES: Final[tuple[type[Message], ...]] = (ErrorMessage,)
