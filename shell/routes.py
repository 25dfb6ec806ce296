"""The shell's one declarative route table: path → request contract → ql_api function → response
contract. Touches nothing: declarations and pure argument binders.

Each binder forwards the parsed body's fields exactly, plus the identity the shell authenticated
(Worker, session and generation from mTLS + ql3w; subject and admitted versions from the bearer
admission). Raw lease tokens become SHA-256 digests here and go no further. There is no per-route
logic beyond this table; app.py runs every route through the same pipeline.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from psycopg.types.json import Jsonb

from qinglong.wire import (
    CANCELLATION_RESPONSES,
    ENQUEUE_RESPONSES,
    LEASE_CONTROL_RESPONSES,
    OFFER_RESPONSES,
    ActivationRequest,
    ActivationResponse,
    ActivationStartFailureRequest,
    ArtifactStored,
    ArtifactUploadRequest,
    AttemptFence,
    CancellationRequest,
    CompletionRequest,
    CompletionResponse,
    EnqueueRequest,
    LeaseControlRequest,
    Message,
    OfferPullRequest,
    RunTimeline,
    Variants,
    WorkerSessionAlive,
    WorkerSessionHeartbeatRequest,
    WorkerSessionOpened,
    WorkerSessionOpenRequest,
    ql3w,
)
from qinglong.wire.fields import Enum, Int, Record, Str, Uuid, wire

WORKER_BASE: Final = "/api/v3/workers/{workerId}/sessions"
SESSION_BASE: Final = WORKER_BASE + "/{sessionId}"
PROJECT_BASE: Final = "/api/v3/projects/{projectId}/runs"
PHASES: Final = "{phase:starting|running|start-failure}"


def token_digest(token: str) -> bytes:
    """SHA-256 of a lease token's text: the only form in which it reaches the database."""
    return hashlib.sha256(token.encode("ascii")).digest()


@dataclass
class Call:
    """What the pipeline knows when it binds a route's arguments."""

    match: Mapping[str, str]
    body: Message | None
    cluster_secret: bytes
    worker_id: str | None = None
    session_id: str | None = None
    generation: int | None = None
    cert_fingerprint: bytes | None = None
    subject_id: str | None = None
    project_version: int | None = None
    binding_version: int | None = None
    minted_token: str | None = None

    def fence(self) -> tuple[Any, ...]:
        """The Attempt fence in ql.attempt_fence order (offer id from the path, or the body)."""
        b = self.body
        assert isinstance(b, AttemptFence)
        offer = self.match.get("offerId") or getattr(b, "offer_id", None)
        return (
            self.worker_id,
            self.session_id,
            b.worker_generation,
            b.project_id,
            b.run_id,
            b.attempt_id,
            offer,
            b.lease_generation,
            token_digest(b.lease_token),
        )

    def admitted(self) -> tuple[Any, ...]:
        return (self.project_version, self.binding_version)


class Admission(Record):
    """ql_api.request_admission_v1's answer, checked before the shell acts on it."""

    decision: str = wire(Enum(("allow", "deny", "require_approval")))
    reason: str = wire(Str(64, min_len=1, pattern="[a-z0-9_.]+"))
    subject_id: str | None = wire(Uuid(), nullable=True)
    subject_kind: str | None = wire(Enum(("user", "agent", "system")), nullable=True)
    project_version: int | None = wire(Int(1), nullable=True)
    binding_version: int | None = wire(Int(1), nullable=True)
    audit_id: str = wire(Uuid())


def _b(call: Call) -> Any:
    return call.body


@dataclass(frozen=True)
class Route:
    """One route. `request` may depend on the path (the activation phase picks its contract)."""

    name: str
    method: Literal["GET", "POST"]
    path: str
    audience: Literal["worker", "worker-open", "user"]
    request: Callable[[Mapping[str, str]], type[Message]] | None
    function: str
    args: Callable[[Call], Sequence[Any]]
    response: Variants[Any] | type[Message]
    permission: str | None = None
    serializable: bool = False
    accepted: frozenset[str] = frozenset()  # statuses answered 202 (user routes)
    shell_fields: Callable[[Call, Mapping[str, Any]], dict[str, Any]] = field(default=lambda c, r: {})
    mints_token: bool = False


def _const(cls: type[Message]) -> Callable[[Mapping[str, str]], type[Message]]:
    return lambda match: cls


def _activation_request(match: Mapping[str, str]) -> type[Message]:
    return ActivationStartFailureRequest if match["phase"] == "start-failure" else ActivationRequest


def _session_key(call: Call, result: Mapping[str, Any]) -> dict[str, Any]:
    assert call.worker_id is not None
    key = ql3w.session_key(call.cluster_secret, result["sessionId"], call.worker_id, result["workerGeneration"])
    return {"sessionKey": ql3w.b64url(key)}


def _lease_token(call: Call, result: Mapping[str, Any]) -> dict[str, Any]:
    return {"leaseToken": call.minted_token} if result.get("status") == "offered" else {}


def mint_token() -> str:
    """A fresh lease token: 32 random bytes, base64url (43 characters)."""
    return ql3w.b64url(secrets.token_bytes(32))


ROUTES: Final[tuple[Route, ...]] = (
    Route(
        "worker.session.open", "POST", WORKER_BASE, "worker-open", _const(WorkerSessionOpenRequest),
        "worker_session_open_v1",
        lambda c: (c.worker_id, _b(c).worker_generation, c.cert_fingerprint, _b(c).capacity),
        WorkerSessionOpened, shell_fields=_session_key,
    ),
    Route(
        "worker.session.heartbeat", "POST", SESSION_BASE + "/heartbeat", "worker",
        _const(WorkerSessionHeartbeatRequest), "worker_session_heartbeat_v1",
        lambda c: (c.worker_id, c.session_id, _b(c).worker_generation), WorkerSessionAlive,
    ),
    Route(
        "worker.offers.pull", "POST", SESSION_BASE + "/offers:pull", "worker", _const(OfferPullRequest),
        "offer_pull_v1",
        lambda c: (c.worker_id, c.session_id, c.generation, token_digest(c.minted_token or ""), _b(c).pull_id),
        OFFER_RESPONSES, shell_fields=_lease_token, mints_token=True,
    ),
    Route(
        "worker.activation", "POST", SESSION_BASE + "/offers/{offerId}/activation/" + PHASES, "worker",
        _activation_request, "attempt_activation_v1",
        lambda c: (c.match["phase"].replace("-", "_"), *c.fence(), getattr(_b(c), "error_code", None)),
        ActivationResponse,
    ),
    Route(
        "worker.lease_control", "POST", SESSION_BASE + "/lease-control", "worker",
        _const(LeaseControlRequest), "attempt_lease_control_v1",
        lambda c: (*c.fence(), _b(c).expected_version), LEASE_CONTROL_RESPONSES,
    ),
    Route(
        "worker.artifacts", "POST", SESSION_BASE + "/offers/{offerId}/artifacts", "worker",
        _const(ArtifactUploadRequest), "artifact_upload_v1",
        lambda c: (*c.fence(), _b(c).kind, bytes.fromhex(_b(c).sha256), _b(c).size, _b(c).content),
        ArtifactStored,
    ),
    Route(
        "worker.completion", "POST", SESSION_BASE + "/offers/{offerId}/completion", "worker",
        _const(CompletionRequest), "attempt_complete_v1",
        lambda c: (
            *c.fence(), _b(c).lease_version, _b(c).exit_code, _b(c).error_code,
            Jsonb([a.to_obj() for a in _b(c).artifacts]),
        ),
        CompletionResponse,
    ),
    Route(
        "user.runs.enqueue", "POST", PROJECT_BASE, "user", _const(EnqueueRequest), "run_enqueue_v1",
        lambda c: (c.subject_id, c.match["projectId"], _b(c).task_id, _b(c).mutation_id, *c.admitted()),
        ENQUEUE_RESPONSES, permission="run.start", accepted=frozenset({"enqueued"}),
    ),
    Route(
        "user.runs.cancel", "POST", PROJECT_BASE + "/{runId}/cancellation", "user",
        _const(CancellationRequest), "run_cancel_request_v1",
        lambda c: (c.subject_id, c.match["projectId"], c.match["runId"], _b(c).mutation_id, *c.admitted()),
        CANCELLATION_RESPONSES, permission="run.stop", serializable=True, accepted=frozenset({"accepted"}),
    ),
    Route(
        "user.runs.read", "GET", PROJECT_BASE + "/{runId}", "user", None, "run_timeline_v1",
        lambda c: (c.match["projectId"], c.match["runId"]), RunTimeline, permission="run.read",
    ),
)  # fmt: skip
