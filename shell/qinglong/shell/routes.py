"""The shell's one declarative route table: path → request contract → ql_api function → response
contract. Touches nothing: declarations and pure argument binders.

Each binder is a typed function of the route's request message that names the ql_api function's
parameters (`{"p_worker_id": …}`; db.py calls the function in named notation), forwarding the parsed
body's fields (or, for a GET that declares them, its parsed query parameters) exactly plus the identity
the shell authenticated (Worker, session and generation from
mTLS + ql3w; subject and admitted versions from the bearer admission). So a renamed wire field fails
mypy, and a renamed SQL parameter fails tests/integration/shell/test_route_binders.py. Raw lease
tokens become SHA-256 digests here and go no further; a Project secret's value is sealed here (a fresh
version id, the admitted Project and the path's name bound in its associated data) and only its ciphertext
goes further, and the sealed values a starting ACK's answer carries are opened here for the Worker
(`open_delivery`). There is no per-route logic beyond this table; app.py runs every route through the same
pipeline.
"""

from __future__ import annotations

import base64
import secrets
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Literal, Never, TypeAlias, TypeVar, cast

from qinglong.shell.db import jsonb
from qinglong.shell.sealing import Sealed, Sealer, Unsealable
from qinglong.wire import (
    CANCELLATION_RESPONSES,
    ENQUEUE_RESPONSES,
    LEASE_CONTROL_RESPONSES,
    OFFER_RESPONSES,
    SECRET_DELETE_RESPONSES,
    SECRET_SET_RESPONSES,
    TASK_REVISION_RESPONSES,
    TASK_SCHEDULE_RESPONSES,
    TASK_STATUS_RESPONSES,
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
    OutputAppended,
    OutputAppendRequest,
    OutputLost,
    OutputLostRequest,
    ProjectList,
    ProjectListQuery,
    ProjectView,
    ProjectWorkers,
    RunList,
    RunListQuery,
    RunOutput,
    RunOutputQuery,
    RunTimeline,
    SchedulePreview,
    SchedulePreviewQuery,
    SecretDeleteRequest,
    SecretList,
    SecretSetRequest,
    TaskList,
    TaskRevisionRequest,
    TaskScheduleRequest,
    TaskStatusRequest,
    Variants,
    WorkerSessionAlive,
    WorkerSessionHeartbeatRequest,
    WorkerSessionOpened,
    WorkerSessionOpenRequest,
    paths,
    ql3w,
)
from qinglong.wire.bundle_fetch import BundleChunk, BundleChunkRequest
from qinglong.wire.common import SECRET_NAME_PATTERN, SECRET_REFS_MAX, SECRET_VALUE_MAX_BYTES, token_digest
from qinglong.wire.fields import Base64Bytes, Enum, Int, List, Nested, Record, Str, Uuid, wire
from qinglong.wire.notify import (
    NotifyDeliveries,
    NotifyDeliveriesQuery,
    NotifyRuleList,
    NotifyRuleRemoved,
    NotifyRuleRemoveRequest,
    NotifyRuleSet,
    NotifyRuleSetRequest,
)
from qinglong.wire.query import Query
from qinglong.wire.specs import UUID_TEXT

Q = TypeVar("Q", bound=Query)


@dataclass
class Call:
    """What the pipeline knows when it binds a route's arguments."""

    match: Mapping[str, str]
    body: Message | None
    keyring: ql3w.Keyring | None  # the worker-ingress app's (None in the user API's)
    worker_id: str | None = None
    session_id: str | None = None
    generation: int | None = None
    rekey: bool = False  # the request verified under an accepted secret, not the current one: re-key the session
    cert_fingerprint: bytes | None = None
    subject_id: str | None = None
    project_id: str | None = None  # the admitted Project's id (the path may name it)
    project_version: int | None = None
    binding_version: int | None = None
    minted_token: str | None = None
    query: Query | None = None
    sealer: Sealer | None = None  # the shell's key-encryption keys (None: shell.toml has no [secrets])

    def query_of(self, cls: type[Q]) -> Q:
        """The parsed query parameters, of the route's own Query class (checked at run time, like bind())."""
        if not isinstance(self.query, cls):
            raise TypeError(f"the query is not a {cls.__name__}")
        return self.query

    def seal(self, value: bytes, *, name: str, version_id: str) -> Sealed:
        """The value sealed for the admitted Project, `name` and `version_id` (SecretRefused without a sealer)."""
        if self.sealer is None or self.project_id is None:
            raise SecretRefused("secrets.unconfigured")
        return self.sealer.seal(value, project_id=self.project_id, name=name, version_id=version_id)


class SecretRefused(Exception):
    """A secret value this shell cannot seal or open: `code` is secrets.unconfigured (no key-encryption key),
    secrets.unknown_kek or secrets.tampered (sealing.Unsealable's reason); `version_id` names the version (the
    only thing logged about it: never a value or key byte)."""

    def __init__(self, code: str, version_id: str | None = None) -> None:
        super().__init__(code)
        self.code, self.version_id = code, version_id


Args = dict[str, object]  # a ql_api function's arguments by parameter name


def _fence(c: Call, b: AttemptFence, offer_id: str) -> Args:
    """The Attempt fence as ql.attempt_fence's parameters (the Offer id from the path, or the body)."""
    return {
        "p_worker_id": c.worker_id,
        "p_session_id": c.session_id,
        "p_worker_generation": b.worker_generation,
        "p_project_id": b.project_id,
        "p_run_id": b.run_id,
        "p_attempt_id": b.attempt_id,
        "p_offer_id": offer_id,
        "p_lease_generation": b.lease_generation,
        "p_token_digest": token_digest(b.lease_token),
    }


def _admitted(c: Call) -> Args:
    return {"p_admitted_project_version": c.project_version, "p_admitted_binding_version": c.binding_version}


class Admission(Record):
    """The admission's answer, checked before the shell acts on it (projectId: v2 only, the id of a named project)."""

    decision: str = wire(Enum(("allow", "deny", "require_approval")))
    reason: str = wire(Str(64, min_len=1, pattern="[a-z0-9_.]+"))
    subject_id: str | None = wire(Uuid(), nullable=True)
    subject_kind: str | None = wire(Enum(("user", "agent", "system")), nullable=True)
    project_version: int | None = wire(Int(1), nullable=True)
    binding_version: int | None = wire(Int(1), nullable=True)
    audit_id: str = wire(Uuid())
    project_id: str | None = wire(Uuid(), optional=True, default=None)

    @staticmethod
    def call(
        digest: bytes, project: str | None, permission: str | None, route: str, request_id: str
    ) -> tuple[str, Args]:
        """The admission function and its arguments (the bearer token's digest, never the token). A project named
        by its canonical id goes to request_admission_v1, which the previous release's schema has too, so this shell
        serves ids while a deploy is under way; a name (or an id in capitals) goes to request_admission_v2, which
        resolves it and names the id. A route that names no Project goes to subject_admission_v1 (the subject
        alone; its function decides per Project)."""
        if project is None:
            return "subject_admission_v1", {"p_token_digest": digest, "p_route": route, "p_request_id": request_id}
        common: Args = {"p_token_digest": digest, "p_permission": permission, "p_route": route,
                        "p_request_id": request_id}  # fmt: skip
        if UUID_TEXT.fullmatch(project):
            return "request_admission_v1", {**common, "p_project_id": project}
        return "request_admission_v2", {**common, "p_project": project}


# A route's request message (Never for a route without a body). Covariant so that the table holds
# routes of different messages as Route; bind() checks at run time what that lets mypy assume.
B = TypeVar("B", bound=Message, covariant=True)


@dataclass(frozen=True)
class RouteOf(Generic[B]):
    """One route. `request` may depend on the path (the activation phase picks its contract); `args`
    binds the parsed request of type B to the function's parameters by name, and mypy refuses a
    binder of another message than the route's request."""

    name: str
    method: Literal["GET", "POST", "PUT"]
    path: str
    audience: Literal["worker", "worker-open", "user"]
    request: Callable[[Mapping[str, str]], type[B]] | None
    function: str
    args: Callable[[Call, B], Args]
    response: Variants[Any] | type[Message]
    permission: str | None = None
    serializable: bool = False
    grouped: bool = False  # its calls run in groups, one statement each (db.Database.call)
    accepted: frozenset[str] = frozenset()  # statuses answered 202 (user routes)
    shell_fields: Callable[[Call, Mapping[str, Any]], dict[str, Any]] = field(default=lambda c, r: {})
    mints_token: bool = False
    query: type[Query] | None = None  # the query parameters a GET takes (none: a query string is ignored)
    # Project secret values: "seal" seals the body's value before the call (the shell must hold a key-encryption
    # key), "open" opens the sealed values the database answers (app.py); either answers the secrets.* codes.
    sealing: Literal["seal", "open"] | None = None

    def bind(self, call: Call) -> Args:
        """The function's arguments by name, from the body this route parsed (of its own request type)."""
        fits = call.body is None if self.request is None else isinstance(call.body, self.request(call.match))
        if not fits:
            raise TypeError(f"{self.name}: the body is not this route's request")
        return self.args(call, cast(B, call.body))


Route: TypeAlias = RouteOf[Message]  # what the pipeline handles: any route of the table


M = TypeVar("M", bound=Message)


def _const(cls: type[M]) -> Callable[[Mapping[str, str]], type[M]]:
    return lambda match: cls


def _activation_request(match: Mapping[str, str]) -> type[ActivationRequest | ActivationStartFailureRequest]:
    return ActivationStartFailureRequest if match["phase"] == "start-failure" else ActivationRequest


def _session_key(call: Call, result: Mapping[str, Any]) -> dict[str, Any]:
    assert call.worker_id is not None
    assert call.keyring is not None
    key = ql3w.session_key(call.keyring.current, result["sessionId"], call.worker_id, result["workerGeneration"])
    return {"sessionKey": ql3w.b64url(key)}


def _lease_token(call: Call, result: Mapping[str, Any]) -> dict[str, Any]:
    return {"leaseToken": call.minted_token} if result.get("status") == "offered" else {}


def mint_token() -> str:
    """A fresh lease token: 32 random bytes, base64url (43 characters)."""
    return ql3w.b64url(secrets.token_bytes(32))


def _session_open(c: Call, b: WorkerSessionOpenRequest) -> Args:
    return {
        "p_worker_id": c.worker_id,
        "p_worker_generation": b.worker_generation,
        "p_cert_fingerprint": c.cert_fingerprint,
        "p_capacity": b.capacity,
    }


def _heartbeat(c: Call, b: WorkerSessionHeartbeatRequest) -> Args:
    return {"p_worker_id": c.worker_id, "p_session_id": c.session_id, "p_worker_generation": b.worker_generation}


def _offer_pull(c: Call, b: OfferPullRequest) -> Args:
    return {
        "p_worker_id": c.worker_id,
        "p_session_id": c.session_id,
        "p_worker_generation": c.generation,
        "p_token_digest": token_digest(c.minted_token or ""),
        "p_pull_id": b.pull_id,
    }


def _activation(c: Call, b: ActivationRequest | ActivationStartFailureRequest) -> Args:
    failure = b if isinstance(b, ActivationStartFailureRequest) else None
    return {
        "p_phase": c.match["phase"].replace("-", "_"),
        **_fence(c, b, c.match["offerId"]),
        "p_error_code": None if failure is None else failure.error_code,
        "p_error_message": None if failure is None else failure.error_message,
    }


def _lease_control(c: Call, b: LeaseControlRequest) -> Args:
    return {**_fence(c, b, b.offer_id), "p_expected_version": b.expected_version, "p_running": bool(b.running)}


def _artifact(c: Call, b: ArtifactUploadRequest) -> Args:
    return {
        **_fence(c, b, c.match["offerId"]),
        "p_kind": b.kind,
        "p_sha256": bytes.fromhex(b.sha256),
        "p_size": b.size,
        "p_content": b.content,
    }


def _output(c: Call, b: OutputAppendRequest) -> Args:
    return {**_fence(c, b, c.match["offerId"]), "p_stream": b.stream, "p_offset": b.offset, "p_data": b.data}


def _output_lost(c: Call, b: OutputLostRequest) -> Args:
    return {**_fence(c, b, c.match["offerId"]), "p_stream": b.stream, "p_written_bytes": b.written_bytes}


def _bundle_chunk(c: Call, b: BundleChunkRequest) -> Args:
    return {**_fence(c, b, c.match["offerId"]), "p_digest": b.digest, "p_index": b.index}


def _completion(c: Call, b: CompletionRequest) -> Args:
    return {
        **_fence(c, b, c.match["offerId"]),
        "p_lease_version": b.lease_version,
        "p_exit_code": b.exit_code,
        "p_error_code": b.error_code,
        "p_artifacts": jsonb([a.to_obj() for a in b.artifacts]),
    }


def _enqueue(c: Call, b: EnqueueRequest) -> Args:
    return {
        "p_subject_id": c.subject_id,
        "p_project_id": c.project_id,
        "p_task_id": b.task_id,
        "p_mutation_id": b.mutation_id,
        **_admitted(c),
    }


def _cancel(c: Call, b: CancellationRequest) -> Args:
    return {
        "p_subject_id": c.subject_id,
        "p_project_id": c.project_id,
        "p_run_id": c.match["runId"],
        "p_mutation_id": b.mutation_id,
        **_admitted(c),
    }


def _read(c: Call, b: Never) -> Args:  # a GET has no body
    return {"p_project_id": c.project_id, "p_run_id": c.match["runId"]}


def _list(c: Call, b: Never) -> Args:
    q = c.query_of(RunListQuery)
    return {
        "p_project_id": c.project_id,
        "p_task_id": q.task_id,
        "p_status": q.status,
        "p_since_ms": q.since_ms,
        "p_until_ms": q.until_ms,
        "p_limit": q.limit,
        "p_cursor": q.cursor,
    }


def _output_read(c: Call, b: Never) -> Args:
    q = c.query_of(RunOutputQuery)
    return {**_read(c, b), "p_attempt_no": q.attempt, "p_after_seq": q.after}


def _tasks(c: Call, b: Never) -> Args:
    return {"p_project": c.project_id}


def _projects(c: Call, b: Never) -> Args:
    return {"p_subject_id": c.subject_id, "p_run_prefix": c.query_of(ProjectListQuery).run_id_prefix}


def _project_view(c: Call, b: Never) -> Args:
    return {"p_project_id": c.project_id, "p_subject_id": c.subject_id}


def _project_workers(c: Call, b: Never) -> Args:
    return {"p_project_id": c.project_id}


def _task_revision(c: Call, b: TaskRevisionRequest) -> Args:
    """The plan as the wire normalised it (what a signature signs, decision 0017), and its signature if any."""
    return {
        "p_subject_id": c.subject_id,
        "p_project_id": c.project_id,
        "p_name": c.match["task"],
        "p_plan": jsonb(b.plan.to_obj()),
        "p_plan_signature": None if b.plan_signature is None else jsonb(b.plan_signature.to_obj()),
        "p_mutation_id": b.mutation_id,
        **_admitted(c),
    }


def _task_status(c: Call, b: TaskStatusRequest) -> Args:
    return {
        "p_subject_id": c.subject_id,
        "p_project_id": c.project_id,
        "p_name": c.match["task"],
        "p_active": b.active,
        **_admitted(c),
    }


def _task_schedule(c: Call, b: TaskScheduleRequest) -> Args:
    return {
        "p_subject_id": c.subject_id,
        "p_project_id": c.project_id,
        "p_name": c.match["task"],
        "p_cron": b.cron,
        "p_timezone": b.timezone,
        "p_overlap": b.overlap,
        **_admitted(c),
    }


def _schedule_preview(c: Call, b: Never) -> Args:  # the admitted Project only scopes who may ask
    q = c.query_of(SchedulePreviewQuery)
    return {"p_cron": q.cron, "p_timezone": q.timezone, "p_count": 5 if q.count is None else q.count}


def _secret_set(c: Call, b: SecretSetRequest) -> Args:
    """A fresh version id, and the value sealed under it: the value itself goes no further than this."""
    name, version_id = c.match["name"], str(uuid.uuid4())
    sealed = c.seal(b.value, name=name, version_id=version_id)
    return {
        "p_subject_id": c.subject_id,
        "p_project_id": c.project_id,
        "p_name": name,
        "p_version_id": version_id,
        "p_size": len(b.value),
        "p_kek_id": sealed.kek_id,
        "p_wrapped_key": sealed.wrapped_key,
        "p_nonce": sealed.nonce,
        "p_ciphertext": sealed.ciphertext,
        "p_mutation_id": b.mutation_id,
        **_admitted(c),
    }


def _secret_delete(c: Call, b: SecretDeleteRequest) -> Args:
    return {
        "p_subject_id": c.subject_id,
        "p_project_id": c.project_id,
        "p_name": c.match["name"],
        "p_mutation_id": b.mutation_id,
        **_admitted(c),
    }


def _secrets(c: Call, b: Never) -> Args:
    return {"p_project": c.project_id}


def _notify_rule_set(c: Call, b: NotifyRuleSetRequest) -> Args:
    return {
        "p_subject_id": c.subject_id,
        "p_project_id": c.project_id,
        "p_name": c.match["rule"],
        "p_events": list(b.events),
        "p_channel": b.channel,
        "p_url": b.url,
        "p_secret_name": b.secret_name,
        "p_template": b.template,
        **_admitted(c),
    }


def _notify_rule_remove(c: Call, b: NotifyRuleRemoveRequest) -> Args:
    return {"p_subject_id": c.subject_id, "p_project_id": c.project_id, "p_name": c.match["rule"], **_admitted(c)}


def _notify_deliveries(c: Call, b: Never) -> Args:
    q = c.query_of(NotifyDeliveriesQuery)
    return {"p_project": c.project_id, "p_rule": q.rule, "p_limit": q.limit or 50}


KEK_ID_PATTERN: Final = "[A-Za-z0-9_-]{12}"  # sealing.kek_id's text (ql.secret_versions.kek_id check)


class SealedSecret(Record):
    """One sealed version a starting ACK's answer carries (ql.attempt_secret_delivery), checked before it is
    opened: the shell's side of the database's answer, never sent on."""

    name: str = wire(Str(64, min_len=1, pattern=SECRET_NAME_PATTERN))
    version: int = wire(Int(1))
    version_id: str = wire(Uuid())
    kek_id: str = wire(Str(12, min_len=12, pattern=KEK_ID_PATTERN))
    wrapped_key: bytes = wire(Base64Bytes(60, min_bytes=60))
    nonce: bytes = wire(Base64Bytes(12, min_bytes=12))
    ciphertext: bytes = wire(Base64Bytes(SECRET_VALUE_MAX_BYTES + 16, min_bytes=17))


class _Delivery(Record):
    """The part of attempt_activation_v2's answer the opening reads: the snapshot's Project and the sealed values."""

    project_id: str = wire(Uuid())
    secrets: tuple[SealedSecret, ...] = wire(List(Nested(SealedSecret), max_items=SECRET_REFS_MAX))


def open_delivery(call: Call, result: Mapping[str, Any]) -> dict[str, Any]:
    """attempt_activation_v2's answer with its sealed `secrets` opened ({name, version, value}) for the Worker;
    an answer without them is returned as it is. WireError: the sealed part is outside its shape (a bad
    projection); SecretRefused: no key-encryption key here, or a value that does not open."""
    if "secrets" not in result:
        return dict(result)
    snapshot = result.get("snapshot")
    project_id = snapshot.get("projectId") if isinstance(snapshot, Mapping) else None
    delivery = _Delivery.from_obj({"projectId": project_id, "secrets": result["secrets"]})
    if call.sealer is None:
        raise SecretRefused("secrets.unconfigured", delivery.secrets[0].version_id if delivery.secrets else None)
    opened = []
    for item in delivery.secrets:
        sealed = Sealed(item.kek_id, item.wrapped_key, item.nonce, item.ciphertext)
        try:
            value = call.sealer.open(sealed, project_id=delivery.project_id, name=item.name, version_id=item.version_id)
        except Unsealable as exc:
            raise SecretRefused(f"secrets.{exc.reason}", item.version_id) from None
        opened.append({"name": item.name, "version": item.version, "value": base64.b64encode(value).decode("ascii")})
    return {**result, "secrets": opened}


# Typed by inference, each entry as RouteOf[its request] (an annotation would impose one message on all).
ROUTES: Final = (
    RouteOf(
        "worker.session.open", "POST", paths.SESSIONS, "worker-open", _const(WorkerSessionOpenRequest),
        "worker_session_open_v1", _session_open, WorkerSessionOpened, shell_fields=_session_key,
    ),
    RouteOf(
        "worker.session.heartbeat", "POST", paths.HEARTBEAT, "worker",
        _const(WorkerSessionHeartbeatRequest), "worker_session_heartbeat_v1", _heartbeat, WorkerSessionAlive,
        grouped=True,
    ),
    RouteOf(
        "worker.offers.pull", "POST", paths.OFFERS_PULL, "worker", _const(OfferPullRequest),
        "offer_pull_v1", _offer_pull, OFFER_RESPONSES, shell_fields=_lease_token, mints_token=True, grouped=True,
    ),
    RouteOf(
        "worker.activation", "POST", paths.ACTIVATION, "worker",
        _activation_request, "attempt_activation_v2", _activation, ActivationResponse, sealing="open", grouped=True,
    ),
    RouteOf(
        "worker.lease_control", "POST", paths.LEASE_CONTROL, "worker",
        _const(LeaseControlRequest), "attempt_lease_control_v2", _lease_control, LEASE_CONTROL_RESPONSES,
        grouped=True,
    ),
    RouteOf(
        "worker.artifacts", "POST", paths.ARTIFACTS, "worker",
        _const(ArtifactUploadRequest), "artifact_upload_v1", _artifact, ArtifactStored,
    ),
    RouteOf(
        "worker.output", "POST", paths.OUTPUT, "worker",
        _const(OutputAppendRequest), "output_append_v1", _output, OutputAppended,
    ),
    RouteOf(
        "worker.output_lost", "POST", paths.OUTPUT_LOST, "worker",
        _const(OutputLostRequest), "output_lost_v1", _output_lost, OutputLost,
    ),
    RouteOf(
        "worker.bundle_chunks", "POST", paths.BUNDLE_CHUNKS, "worker",
        _const(BundleChunkRequest), "bundle_chunk_v1", _bundle_chunk, BundleChunk,
    ),
    RouteOf(
        "worker.completion", "POST", paths.COMPLETION, "worker",
        _const(CompletionRequest), "attempt_complete_v1", _completion, CompletionResponse, grouped=True,
    ),
    RouteOf(
        "user.runs.enqueue", "POST", paths.RUNS, "user", _const(EnqueueRequest), "run_enqueue_v1", _enqueue,
        ENQUEUE_RESPONSES, permission="run.start", accepted=frozenset({"enqueued"}),
    ),
    RouteOf(
        "user.runs.cancel", "POST", paths.RUN_CANCELLATION, "user",
        _const(CancellationRequest), "run_cancel_request_v1", _cancel,
        CANCELLATION_RESPONSES, permission="run.stop", serializable=True, accepted=frozenset({"accepted"}),
    ),
    RouteOf(
        "user.runs.read", "GET", paths.RUN, "user", None, "run_timeline_v2", _read, RunTimeline,
        permission="run.read",
    ),
    RouteOf(
        "user.runs.list", "GET", paths.RUNS, "user", None, "run_list_v1", _list, RunList, permission="run.read",
        query=RunListQuery,
    ),
    RouteOf(
        "user.tasks.list", "GET", paths.TASKS, "user", None, "task_list_v1", _tasks, TaskList,
        permission="run.read",
    ),
    RouteOf(
        "user.runs.output", "GET", paths.RUN_OUTPUT, "user", None, "run_output_v1", _output_read,
        RunOutput, permission="run.read", query=RunOutputQuery,
    ),
    RouteOf(
        "user.projects.list", "GET", paths.PROJECTS, "user", None, "subject_projects_v1", _projects, ProjectList,
        query=ProjectListQuery,
    ),
    RouteOf(
        "user.project.read", "GET", paths.PROJECT, "user", None, "project_view_v1", _project_view, ProjectView,
        permission="run.read",
    ),
    RouteOf(
        "user.workers.list", "GET", paths.WORKERS, "user", None, "project_workers_v1", _project_workers,
        ProjectWorkers, permission="run.read",
    ),
    RouteOf(
        "user.tasks.revise", "PUT", paths.TASK, "user", _const(TaskRevisionRequest), "task_revision_create_v1",
        _task_revision, TASK_REVISION_RESPONSES, permission="task.write", accepted=frozenset({"created", "revised"}),
    ),
    RouteOf(
        "user.tasks.status", "PUT", paths.TASK_STATUS, "user", _const(TaskStatusRequest), "task_status_change_v1",
        _task_status, TASK_STATUS_RESPONSES, permission="task.write",
    ),
    RouteOf(
        "user.tasks.schedule", "PUT", paths.TASK_SCHEDULE, "user", _const(TaskScheduleRequest),
        "task_schedule_change_v1", _task_schedule, TASK_SCHEDULE_RESPONSES, permission="task.write",
    ),
    RouteOf(
        "user.schedules.preview", "GET", paths.SCHEDULE_PREVIEW, "user", None, "schedule_preview_v1",
        _schedule_preview, SchedulePreview, permission="run.read", query=SchedulePreviewQuery,
    ),
    RouteOf(
        "user.secrets.set", "PUT", paths.SECRET, "user", _const(SecretSetRequest), "secret_set_v1", _secret_set,
        SECRET_SET_RESPONSES, permission="secret.write", accepted=frozenset({"set"}), sealing="seal",
    ),
    RouteOf(
        "user.secrets.delete", "POST", paths.SECRET_DELETION, "user", _const(SecretDeleteRequest),
        "secret_delete_v1", _secret_delete, SECRET_DELETE_RESPONSES, permission="secret.write",
        accepted=frozenset({"deleted"}),
    ),
    RouteOf(
        "user.secrets.list", "GET", paths.SECRETS, "user", None, "secret_list_v1", _secrets, SecretList,
        permission="secret.read",
    ),
    RouteOf(
        "user.notify_rules.set", "PUT", paths.NOTIFY_RULE, "user", _const(NotifyRuleSetRequest), "notify_rule_set_v1",
        _notify_rule_set, NotifyRuleSet, permission="run.start", accepted=frozenset({"created", "updated"}),
    ),
    RouteOf(
        "user.notify_rules.remove", "POST", paths.NOTIFY_RULE_REMOVAL, "user", _const(NotifyRuleRemoveRequest),
        "notify_rule_remove_v1", _notify_rule_remove, NotifyRuleRemoved, permission="run.start",
        accepted=frozenset({"removed"}),
    ),
    RouteOf(
        "user.notify_rules.list", "GET", paths.NOTIFY_RULES, "user", None, "notify_rule_list_v1", _secrets,
        NotifyRuleList, permission="run.read",
    ),
    RouteOf(
        "user.notify_deliveries.list", "GET", paths.NOTIFY_DELIVERIES, "user", None, "notify_deliveries_v1",
        _notify_deliveries, NotifyDeliveries, permission="run.read", query=NotifyDeliveriesQuery,
    ),
)  # fmt: skip
