"""qinglong/remote-run-completion@v1: artifact upload and completion. Touches nothing: declarations.

Upload (≤ 1.5 MiB): the fence, the kind, the declared SHA-256 and size, and the content as padded
base64; the answer is ql_api.artifact_upload_v1's `stored` receipt. Completion: the fence, the latest
Lease version, the exit code and/or error code (at least one, as the database requires) and ≤ 2
receipts; the answer is ql_api.attempt_complete_v1's `completed | already_completed` result with the
exact snapshot. Both directions share the family's schema; the route says which message a body is.
"""

from __future__ import annotations

from typing import Final, Literal

from qinglong.wire.activation import Snapshot
from qinglong.wire.codec import KIB
from qinglong.wire.common import (
    ARTIFACT_KINDS,
    ATTEMPT_STATUSES,
    ERROR_CODE,
    RUN_STATUSES,
    SHA256_HEX,
    ArtifactKind,
    ArtifactReceipt,
    AttemptFence,
    AttemptStatus,
    RunStatus,
)
from qinglong.wire.fields import Base64Bytes, Enum, Int, List, Message, Nested, Record, Uuid, wire

COMPLETION_SCHEMA: Final = "qinglong/remote-run-completion@v1"
UPLOAD_CAP: Final = 1536 * KIB
# The wire's artifact limit: ql.settings.artifact_max_bytes' default. Its base64 (4/3) plus the
# fence fits UPLOAD_CAP; raising the database setting above this cannot raise what the wire carries.
ARTIFACT_MAX_BYTES: Final = 1024 * KIB


class CompletionArtifact(Record):
    """A receipt as the completion carries it (no kind: the database matches it by id)."""

    artifact_id: str = wire(Uuid())
    sha256: str = wire(SHA256_HEX)
    size: int = wire(Int(0, ARTIFACT_MAX_BYTES))


class CompletionRequest(AttemptFence):
    """Body of a completion: the latest Lease version, the exit, the receipts."""

    SCHEMA = COMPLETION_SCHEMA
    CAP = 4 * KIB
    REQUIRE_ANY = (("exit_code", "error_code"),)

    lease_version: int = wire(Int(1))
    exit_code: int | None = wire(Int(0, 255), nullable=True)
    error_code: str | None = wire(ERROR_CODE, nullable=True)
    artifacts: tuple[CompletionArtifact, ...] = wire(List(Nested(CompletionArtifact), max_items=2))


class CompletionResponse(Message):
    """The Attempt and Run after the completion (or its exact replay), with the snapshot."""

    SCHEMA = COMPLETION_SCHEMA
    CAP = 16 * KIB

    status: Literal["completed", "already_completed"] = wire(Enum(("completed", "already_completed")))
    run_status: RunStatus = wire(Enum(RUN_STATUSES))
    attempt_status: AttemptStatus = wire(Enum(ATTEMPT_STATUSES))
    snapshot: Snapshot = wire(Nested(Snapshot))


class ArtifactUploadRequest(AttemptFence):
    """Body of an upload. Python holds the decoded `content`; the wire carries `contentBase64`."""

    SCHEMA = COMPLETION_SCHEMA
    CAP = UPLOAD_CAP

    kind: ArtifactKind = wire(Enum(ARTIFACT_KINDS))
    sha256: str = wire(SHA256_HEX)
    size: int = wire(Int(0, ARTIFACT_MAX_BYTES))
    content: bytes = wire(Base64Bytes(ARTIFACT_MAX_BYTES), name="contentBase64", secret=True)


class ArtifactStored(Message):
    """The stored artifact's receipt (also for an exact replay)."""

    SCHEMA = COMPLETION_SCHEMA
    CAP = 4 * KIB

    status: Literal["stored"] = wire(Enum(("stored",)), default="stored")
    receipt: ArtifactReceipt = wire(Nested(ArtifactReceipt))


MESSAGES: Final[tuple[type[Message], ...]] = (
    CompletionRequest,
    CompletionResponse,
    ArtifactUploadRequest,
    ArtifactStored,
)
