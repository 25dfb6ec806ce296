"""Value sets and records several message families share. Touches nothing: pure declarations.

The status sets mirror the database domains (`ql.run_status`, `ql.attempt_status`,
`ql.cancel_reason`, db/deploy/ql/types.sql) and the bounds mirror the table checks, so a valid
database projection always passes and anything else is refused.
"""

from __future__ import annotations

import hashlib
from typing import Final, Literal, get_args

from qinglong.wire.fields import Enum, Int, Message, Record, Str, Token, Uuid, wire

MAX_INT32: Final = 2**31 - 1
ARTIFACT_COLUMN_MAX_BYTES: Final = 8 * 1024 * 1024  # ql.artifacts.size check
ERROR_CODE_PATTERN: Final = "[a-z0-9_.]{1,64}"  # ql.run_attempts.error_code check
SECRET_NAME_PATTERN: Final = "[A-Z_][A-Z0-9_]{0,63}"  # noqa: S105  a Project secret's name (ql.secret_name)
SECRET_VALUE_MAX_BYTES: Final = 64 * 1024  # a secret value: 1 byte to 64 KiB, any bytes
SECRET_REFS_MAX: Final = 16  # the secrets one plan may name (ql.plan_is_valid)
NAME_PATTERN: Final = "[A-Za-z0-9][A-Za-z0-9._-]{0,127}"  # ql.projects.name and ql.tasks.name check
SHA256_HEX_PATTERN: Final = "[0-9a-f]{64}"
WORKER_URI_PREFIX: Final = "urn:qinglong:worker:"  # + its id: the SAN URI that names a Worker in its certificate

RunStatus = Literal[
    "created",
    "queued",
    "waiting_approval",
    "retry_wait",
    "lost",
    "running",
    "succeeded",
    "failed",
    "cancelled",
    "timed_out",
]
AttemptStatus = Literal[
    "claimed", "starting", "running", "succeeded", "failed", "cancelled", "timed_out", "lost", "abandoned"
]
OpenRunStatus = Literal["created", "queued", "waiting_approval", "retry_wait", "lost", "running"]
EndedRunStatus = Literal["succeeded", "failed", "cancelled", "timed_out"]
EndedAttemptStatus = Literal["succeeded", "failed", "cancelled", "timed_out"]
CancelReason = Literal["user", "timeout", "policy", "shutdown", "reconcile"]
ArtifactKind = Literal["log", "result"]

RUN_STATUSES: Final[tuple[RunStatus, ...]] = get_args(RunStatus)
OPEN_RUN_STATUSES: Final[tuple[OpenRunStatus, ...]] = get_args(OpenRunStatus)
ENDED_RUN_STATUSES: Final[tuple[EndedRunStatus, ...]] = get_args(EndedRunStatus)
ATTEMPT_STATUSES: Final[tuple[AttemptStatus, ...]] = get_args(AttemptStatus)
ENDED_ATTEMPT_STATUSES: Final[tuple[EndedAttemptStatus, ...]] = get_args(EndedAttemptStatus)
CANCEL_REASONS: Final[tuple[CancelReason, ...]] = get_args(CancelReason)
ARTIFACT_KINDS: Final[tuple[ArtifactKind, ...]] = get_args(ArtifactKind)


# Shared specs (frozen, so one instance serves every field that uses it).
ERROR_CODE: Final = Str(64, min_len=1, pattern=ERROR_CODE_PATTERN)
SHA256_HEX: Final = Str(64, min_len=64, pattern=SHA256_HEX_PATTERN)
TIME_MS: Final = Int()  # ql.ms: milliseconds of database time, 0..2^53-1


def token_digest(token: str) -> bytes:
    """SHA-256 of a token's text (a lease token or a user's bearer token, both ASCII by their patterns): the
    only form in which a token reaches the database."""
    return hashlib.sha256(token.encode("ascii")).digest()


class AttemptFence(Message):
    """The fence every Attempt-scoped Worker request carries. The Worker and session ids come from
    the authenticated path; the Offer id from the path or (lease control) the body."""

    worker_generation: int = wire(Int(1))
    project_id: str = wire(Uuid())
    run_id: str = wire(Uuid())
    attempt_id: str = wire(Uuid())
    lease_generation: int = wire(Int(1))
    lease_token: str = wire(Token(), secret=True)


class ArtifactReceipt(Record):
    """A stored artifact as the database projects it: (id, kind, sha256 hex, size)."""

    artifact_id: str = wire(Uuid())
    kind: ArtifactKind = wire(Enum(ARTIFACT_KINDS))
    sha256: str = wire(SHA256_HEX)
    size: int = wire(Int(0, ARTIFACT_COLUMN_MAX_BYTES))
