"""Generate docs/protocol.md from the wire declarations, so the document cannot drift from the code.

Everything in the document is read from `qinglong.wire` (schemas, byte caps, fields, bounds,
patterns, and the error table `qinglong.wire.errors.ERRORS`: each code's HTTP status, meaning and
the routes that can answer it) and from `qinglong.shell.routes.ROUTES` (method, path, ql_api
function, audience, permission); no source text is read. The examples are hand-written values, but
each one is constructed through its message class and parsed back, so an example that breaks its
contract stops the generator. Usage:

    python scripts/gen_protocol.py           # write docs/protocol.md
    python scripts/gen_protocol.py --check   # exit 1 when docs/protocol.md differs from the output

The output is deterministic: fixed orders, no timestamps.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import inspect
import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from qinglong.shell.routes import ROUTES, Route
from qinglong.wire import (
    ALL_MESSAGES,
    ActivationRequest,
    ActivationResponse,
    ActivationStartFailureRequest,
    ArtifactReceipt,
    ArtifactStored,
    ArtifactUploadRequest,
    CancellationAccepted,
    CancellationAlreadyRequested,
    CancellationAlreadyTerminal,
    CancellationRequest,
    CompletionArtifact,
    CompletionRequest,
    CompletionResponse,
    EnqueueRequest,
    ErrorMessage,
    Executor,
    LeaseControlRequest,
    LeaseRenewed,
    LeaseStopRequested,
    LeaseTerminal,
    Message,
    Offer,
    OfferEmpty,
    OfferOffered,
    OfferPullRequest,
    OutputAppended,
    OutputAppendRequest,
    OutputLost,
    OutputLostRequest,
    Plan,
    ProjectList,
    ProjectView,
    ProjectWorker,
    ProjectWorkers,
    Record,
    RunAlreadyEnqueued,
    RunEnqueued,
    RunList,
    RunListQuery,
    RunOutput,
    RunOutputQuery,
    RunProjection,
    RunSummary,
    RunTimeline,
    SecretAlreadyDeleted,
    SecretAlreadySet,
    SecretDeleted,
    SecretDeleteRequest,
    SecretEntry,
    SecretList,
    SecretSet,
    SecretSetRequest,
    Snapshot,
    TaskList,
    TaskSchedule,
    TaskSummary,
    TimelineEvent,
    Variants,
    WorkerSessionAlive,
    WorkerSessionHeartbeatRequest,
    WorkerSessionOpened,
    WorkerSessionOpenRequest,
    activation,
    bundle_fetch,
    cancellation,
    completion,
    enqueue,
    errors,
    lease_control,
    notify,
    offer,
    output,
    project,
    ql3w,
    run_list,
    secrets,
    session,
    tasks,
    timeline,
)
from qinglong.wire import task_change as tc
from qinglong.wire.activation import PHASES
from qinglong.wire.bundle_fetch import BundleChunk, BundleChunkRequest
from qinglong.wire.codec import KIB, MAX_DEPTH, MAX_SAFE_INTEGER
from qinglong.wire.errors import ERRORS, Scope
from qinglong.wire.fields import (
    Base64Bytes,
    Bool,
    Enum,
    Field,
    Int,
    List,
    Map,
    Nested,
    Null,
    Spec,
    Str,
    Token,
    Uuid,
)
from qinglong.wire.notify import (
    NotifyAttempt,
    NotifyDeliveries,
    NotifyDeliveriesQuery,
    NotifyNotification,
    NotifyRule,
    NotifyRuleList,
    NotifyRuleRemoved,
    NotifyRuleRemoveRequest,
    NotifyRuleSet,
    NotifyRuleSetRequest,
)
from qinglong.wire.output import OutputAttempt, OutputChunk, OutputStream
from qinglong.wire.project import ProjectListQuery, RunMatch, VisibleProject
from qinglong.wire.query import Query

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "docs" / "protocol.md"


# -- the message families, in the order a Run meets them ----------------------------------------


@dataclass(frozen=True)
class Family:
    title: str
    module: ModuleType
    schema: str


FAMILIES: tuple[Family, ...] = (
    Family("Worker sessions", session, session.SESSION_SCHEMA),
    Family("Offers", offer, offer.OFFER_SCHEMA),
    Family("Activation", activation, activation.ACTIVATION_SCHEMA),
    Family("Lease control", lease_control, lease_control.LEASE_CONTROL_SCHEMA),
    Family("Completion and artifact upload", completion, completion.COMPLETION_SCHEMA),
    Family("User cancellation", cancellation, cancellation.CANCELLATION_SCHEMA),
    Family("Enqueue", enqueue, enqueue.ENQUEUE_SCHEMA),
    Family("Run timeline", timeline, timeline.TIMELINE_SCHEMA),
    Family("Run history", run_list, run_list.RUN_LIST_SCHEMA),
    Family("Task output", output, output.OUTPUT_SCHEMA),
    Family("Bundle fetch", bundle_fetch, bundle_fetch.BUNDLE_FETCH_SCHEMA),
    Family("Task list", tasks, tasks.TASK_LIST_SCHEMA),
    Family("Task changes and schedule previews", tc, tc.TASK_SCHEMA),
    Family("Project view and its Workers", project, project.PROJECT_VIEW_SCHEMA),
    Family("Project secrets", secrets, secrets.SECRET_SCHEMA),
    Family("Notifications", notify, notify.NOTIFY_SCHEMA),
    Family("Errors", errors, errors.ERROR_SCHEMA),
)

AUDIENCES = {
    "worker-open": "Worker: mutual TLS only (the client certificate names the Worker)",
    "worker": "Worker: mutual TLS and a `ql3w` signature",
    "user": "user or agent: `Authorization: Bearer <token>`",
}


# -- example values: obviously fake, but valid -------------------------------------------------

WORKER = "a0000000-0000-4000-8000-000000000001"
SESSION = "b0000000-0000-4000-8000-000000000002"
OLD_SESSION = "b0000000-0000-4000-8000-000000000001"
PROJECT = "c0000000-0000-4000-8000-000000000003"
TASK = "d0000000-0000-4000-8000-000000000004"
REVISION = "d0000000-0000-4000-8000-000000000005"
RUN = "e0000000-0000-4000-8000-000000000006"
RULE = "f1000000-0000-4000-8000-000000000011"
NOTIFICATION = "f2000000-0000-4000-8000-000000000012"
BUNDLE = hashlib.sha256(b"an archive of scripts").hexdigest()
ATTEMPT = "e0000000-0000-4000-8000-000000000007"
OFFER = "f0000000-0000-4000-8000-000000000008"
ARTIFACT = "f0000000-0000-4000-8000-000000000009"
PULL = "f0000000-0000-4000-8000-00000000000a"
# Fake secrets, 43 characters each: valid as 32 bytes of base64url, and obviously not real.
LEASE_TOKEN = "FAKE-lease-token-for-the-docs-only-0000000A"  # noqa: S105
SESSION_KEY = "FAKE-session-key-for-the-docs-only-0000000A"
REQUEST_ID = "0123456789abcdef0123456789abcdef"
CURSOR = "AAABm3baqADgAAAAAABAAIAAAAAAAAAG"  # the run-list cursor of (T0, RUN): opaque to clients
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z, in ms
LOG = b"hello from a Qinglong task\n"
LOG_SHA256 = hashlib.sha256(LOG).hexdigest()


def _fence() -> dict[str, Any]:
    return {
        "worker_generation": 1,
        "project_id": PROJECT,
        "run_id": RUN,
        "attempt_id": ATTEMPT,
        "lease_generation": 1,
        "lease_token": LEASE_TOKEN,
    }


def _snapshot(run_status: str, attempt_status: str, **changes: Any) -> Snapshot:
    values: dict[str, Any] = {
        "project_id": PROJECT,
        "run_id": RUN,
        "attempt_id": ATTEMPT,
        "offer_id": OFFER,
        "attempt_no": 1,
        "run_status": run_status,
        "attempt_status": attempt_status,
        "attempt_version": 2,
        "lease_generation": 1,
        "lease_version": 1,
        "lease_expires_at_ms": T0 + 30_000,
        "callback_sequence": 1,
        "deadline_at_ms": T0 + 60_000,
        "started_at_ms": T0 + 5,
        "running_at_ms": None,
        "ended_at_ms": None,
        "exit_code": None,
        "error_code": None,
        "cancel_requested_at_ms": None,
        "cancel_reason": None,
        "executor": Executor(kind="process", version=1),
        "artifacts": (),
    }
    values.update(changes)
    return Snapshot(**values)


def examples() -> dict[type[Message], Message]:
    """One valid instance of every message (constructing it checks every field)."""
    receipt = ArtifactReceipt(artifact_id=ARTIFACT, kind="log", sha256=LOG_SHA256, size=len(LOG))
    plan = Plan(
        argv=("sh", "-c", "echo hello from a Qinglong task"),
        env={"LANG": "C.UTF-8"},
        timeout_ms=60_000,
        max_attempts=3,
        retry_backoff_ms=10_000,
        pool="default",
    )
    done = {
        "attempt_version": 4,
        "lease_version": 3,
        "lease_expires_at_ms": T0 + 40_000,
        "callback_sequence": 3,
        "running_at_ms": T0 + 40,
        "ended_at_ms": T0 + 12_000,
        "exit_code": 0,
        "artifacts": (receipt,),
    }
    found: list[Message] = [
        WorkerSessionOpenRequest(capacity=2, worker_generation=1),
        WorkerSessionOpened(
            session_id=SESSION,
            worker_generation=1,
            capacity=2,
            opened_at_ms=T0,
            expires_at_ms=T0 + 120_000,
            replaced_session_id=OLD_SESSION,
            session_key=SESSION_KEY,
        ),
        WorkerSessionHeartbeatRequest(worker_generation=1),
        WorkerSessionAlive(session_id=SESSION, expires_at_ms=T0 + 150_000),
        OfferPullRequest(pull_id=PULL),
        OfferOffered(
            offer=Offer(
                offer_id=OFFER,
                project_id=PROJECT,
                run_id=RUN,
                attempt_id=ATTEMPT,
                attempt_no=1,
                lease_generation=1,
                lease_version=1,
                offered_at_ms=T0,
                lease_expires_at_ms=T0 + 30_000,
                offer_expires_at_ms=T0 + 30_000,
                plan=plan,
            ),
            lease_token=LEASE_TOKEN,
        ),
        OfferEmpty(reason="no_work"),
        ActivationRequest(**_fence()),
        ActivationStartFailureRequest(**_fence(), error_code="spawn.os_error"),
        ActivationResponse(status="applied", snapshot=_snapshot("running", "starting")),
        LeaseControlRequest(**_fence(), offer_id=OFFER, expected_version=1),
        LeaseRenewed(lease_version=2, renewed_at_ms=T0 + 10_000, expires_at_ms=T0 + 40_000, deadline_at_ms=T0 + 60_000),
        LeaseStopRequested(
            lease_version=3,
            renewed_at_ms=T0 + 20_000,
            expires_at_ms=T0 + 50_000,
            deadline_at_ms=T0 + 60_000,
            stop_reason="user",
            cancel_requested_at_ms=T0 + 15_000,
        ),
        LeaseTerminal(
            run_status="succeeded", attempt_status="succeeded", exit_code=0, error_code=None, ended_at_ms=T0 + 12_000
        ),
        CompletionRequest(
            **_fence(),
            lease_version=3,
            exit_code=0,
            error_code=None,
            artifacts=(CompletionArtifact(artifact_id=ARTIFACT, sha256=LOG_SHA256, size=len(LOG)),),
        ),
        CompletionResponse(
            status="completed",
            run_status="succeeded",
            attempt_status="succeeded",
            snapshot=_snapshot("succeeded", "succeeded", **done),
        ),
        ArtifactUploadRequest(**_fence(), kind="log", sha256=LOG_SHA256, size=len(LOG), content=LOG),
        ArtifactStored(receipt=receipt),
        CancellationRequest(mutation_id="cancel-2026-01-01-0001"),
        CancellationAccepted(run_id=RUN, run_status="running", cancel_requested_at_ms=T0 + 15_000, reason="user"),
        CancellationAlreadyRequested(
            run_id=RUN, run_status="running", cancel_requested_at_ms=T0 + 15_000, reason="timeout"
        ),
        CancellationAlreadyTerminal(run_id=RUN, run_status="succeeded", cancel_requested_at_ms=None, reason=None),
        EnqueueRequest(mutation_id="enqueue-2026-01-01-0001", task_id=TASK),
        RunEnqueued(run_id=RUN, task_revision_id=REVISION, queued_at_ms=T0),
        RunAlreadyEnqueued(run_id=RUN, task_revision_id=REVISION, queued_at_ms=T0),
        RunTimeline(
            run=RunProjection(
                run_id=RUN,
                project_id=PROJECT,
                task_id=TASK,
                task_revision_id=REVISION,
                status="succeeded",
                version=7,
                event_sequence=6,
                attempt_count=1,
                cancel_requested_at_ms=None,
                cancel_reason=None,
                created_at_ms=T0,
                ended_at_ms=T0 + 12_000,
            ),
            events=(
                TimelineEvent(
                    sequence=1,
                    type="run.queued",
                    actor_kind="user",
                    attempt_id=None,
                    occurred_at_ms=T0,
                    payload='{"mutationId":"enqueue-2026-01-01-0001","taskId":"' + TASK + '"}',
                ),
                TimelineEvent(
                    sequence=2,
                    type="attempt.starting",
                    actor_kind="worker",
                    attempt_id=ATTEMPT,
                    occurred_at_ms=T0 + 1,
                    payload='{"attemptNo":1,"deadlineAtMs":' + str(T0 + 3_600_000) + "}",
                ),
            ),
            truncated=False,
        ),
        RunList(
            runs=(
                RunSummary(
                    run_id=RUN,
                    task_id=TASK,
                    task_name="nightly-backup",
                    status="succeeded",
                    attempt_count=2,
                    created_at_ms=T0,
                    started_at_ms=T0 + 5,
                    ended_at_ms=T0 + 75_000,
                    exit_code=0,
                    cancel_reason=None,
                ),
            ),
            next_cursor=CURSOR,
        ),
        OutputAppendRequest(**_fence(), stream="stdout", offset=0, data=LOG),
        OutputAppended(stream="stdout", next_offset=len(LOG), head_bytes=524_288, tail_bytes=524_288),
        OutputLostRequest(**_fence(), stream="stdout", written_bytes=4096),
        OutputLost(status="recorded", stream="stdout", written_bytes=4096, stored_bytes=len(LOG)),
        BundleChunkRequest(**_fence(), digest=BUNDLE, index=0),
        BundleChunk(digest=BUNDLE, index=0, chunk_count=1, size_bytes=len(LOG), data=LOG),
        RunOutput(
            run_status="succeeded",
            attempt=OutputAttempt(
                attempt_id=ATTEMPT,
                attempt_no=1,
                status="succeeded",
                exit_code=0,
                error_code=None,
                ended_at_ms=T0 + 9,
                claimed_at_ms=T0 + 2,
                started_at_ms=T0 + 3,
                worker_name="router-1",
            ),
            attempts=1,
            streams=(OutputStream(stream="stdout", next_offset=len(LOG), head_bytes=524_288, kept_bytes=len(LOG)),),
            chunks=(OutputChunk(seq=41, stream="stdout", offset=0, data=LOG),),
            more=False,
        ),
        TaskList(
            project_id=PROJECT,
            project="nightly-jobs",
            tasks=(
                TaskSummary(
                    task_id=TASK,
                    name="nightly-backup",
                    status="active",
                    revision_id=REVISION,
                    argv=("sh", "-c", "/usr/local/bin/backup.sh"),
                    pool="default",
                    timeout_ms=600_000,
                    max_attempts=3,
                    schedule=TaskSchedule(
                        cron="30 2 * * *",
                        timezone="Europe/Berlin",
                        overlap="skip",
                        next_fires_ms=(T0 + 5_400_000, T0 + 91_800_000, T0 + 178_200_000),
                    ),
                    plan=Plan(argv=("sh", "-c", "/usr/local/bin/backup.sh"), timeout_ms=600_000, max_attempts=3),
                    signed=True,
                ),
            ),
        ),
        ProjectView(
            project_id=PROJECT,
            project="nightly-jobs",
            project_status="active",
            subject="alice",
            subject_kind="user",
            role="operator",
            run_read="allow",
            run_start="allow",
            run_stop="allow",
            task_write="deny",
        ),
        ProjectList(
            projects=(
                VisibleProject(project_id=PROJECT, project="nightly-jobs", project_status="active", role="operator"),
            ),
            runs=(
                RunMatch(run_id=RUN, project_id=PROJECT, project="nightly-jobs", task_name="backup", status="failed"),
            ),
            more_runs=False,
        ),
        ProjectWorkers(
            workers=(
                ProjectWorker(
                    name="router-1",
                    pool="default",
                    generation=2,
                    status="active",
                    online=True,
                    last_contact_at_ms=T0 + 9,
                    active_attempts=1,
                ),
            ),
        ),
        tc.TaskRevisionRequest(
            mutation_id="task-2026-01-01-0001",
            plan=Plan(argv=("sh", "-c", "/usr/local/bin/backup.sh"), timeout_ms=600_000, max_attempts=3),
        ),
        tc.TaskCreated(task_id=TASK, revision_id=REVISION, name="nightly-backup", signed=False),
        tc.TaskRevised(task_id=TASK, revision_id=REVISION, name="nightly-backup", signed=False),
        tc.TaskRevisionReplayed(task_id=TASK, revision_id=REVISION, name="nightly-backup", signed=False),
        tc.TaskStatusRequest(active=False),
        tc.TaskEnabled(project_id=PROJECT, task_id=TASK, name="nightly-backup", changed=True),
        tc.TaskDisabled(project_id=PROJECT, task_id=TASK, name="nightly-backup", changed=True),
        tc.TaskScheduleRequest(cron="0 */10 * * * *", timezone="Europe/Berlin", overlap="skip"),
        tc.TaskScheduleSet(
            task_id=TASK, cron="0 */10 * * * *", timezone="Europe/Berlin", overlap="skip", next_fire_at_ms=T0 + 600_000
        ),
        tc.TaskScheduleUnchanged(
            task_id=TASK, cron="0 */10 * * * *", timezone="Europe/Berlin", overlap="skip", next_fire_at_ms=T0 + 600_000
        ),
        tc.TaskScheduleCleared(task_id=TASK),
        tc.SchedulePreview(
            cron="30 2 * * *",
            timezone="Europe/Berlin",
            fires=(
                tc.FireTime(at_ms=T0 + 5_400_000, local="2026-01-02T02:30:00+01:00"),
                tc.FireTime(at_ms=T0 + 91_800_000, local="2026-01-03T02:30:00+01:00"),
            ),
        ),
        SecretSetRequest(mutation_id="secret-2026-01-01-0001", value=b"FAKE value for the docs only"),
        SecretSet(name="DB_PASSWORD", version=2, size=28, set_at_ms=T0 + 7),
        SecretAlreadySet(name="DB_PASSWORD", version=2, size=28, set_at_ms=T0 + 7),
        SecretDeleteRequest(mutation_id="secret-2026-01-02-0001"),
        SecretDeleted(name="DB_PASSWORD"),
        SecretAlreadyDeleted(name="DB_PASSWORD"),
        SecretList(
            project_id=PROJECT,
            project="nightly-jobs",
            secrets=(
                SecretEntry(name="DB_PASSWORD", version=2, size=28, set_by="alice", set_at_ms=T0 + 7, created_at_ms=T0),
            ),
        ),
        NotifyRuleSetRequest(
            events=("run.failed", "run.timed_out"),
            channel="webhook",
            url="https://hooks.example.com/qinglong",
            secret_name="HOOK_KEY",  # noqa: S106 - a secret's name
        ),
        NotifyRuleSet(status="created", rule_id=RULE, name="ops-hook"),
        NotifyRuleRemoveRequest(),
        NotifyRuleRemoved(name="ops-hook", dropped=0),
        NotifyRuleList(
            project_id=PROJECT,
            project="nightly-jobs",
            rules=(
                NotifyRule(
                    name="ops-hook",
                    events=("run.failed", "run.timed_out"),
                    channel="webhook",
                    url="https://hooks.example.com/qinglong",
                    secret_name="HOOK_KEY",  # noqa: S106 - a secret's name
                    created_at_ms=T0,
                    updated_at_ms=T0,
                    pending=0,
                ),
            ),
        ),
        NotifyDeliveries(
            project_id=PROJECT,
            project="nightly-jobs",
            notifications=(
                NotifyNotification(
                    id=NOTIFICATION,
                    rule="ops-hook",
                    kind="run.failed",
                    state="delivered",
                    attempts=2,
                    created_at_ms=T0,
                    ended_at_ms=T0 + 2041,
                    run_id=RUN,
                    task_id=TASK,
                    deliveries=(
                        NotifyAttempt(
                            attempt_no=1, ok=False, status_code=503, error="http.status", duration_ms=35, at_ms=T0 + 40
                        ),
                        NotifyAttempt(attempt_no=2, ok=True, status_code=204, duration_ms=12, at_ms=T0 + 2041),
                    ),
                ),
            ),
        ),
        ErrorMessage(code="fenced.stale_version", message="stale_version", request_id=REQUEST_ID),
    ]
    by_class: dict[type[Message], Message] = {}
    for message in found:
        again = type(message).parse(message.to_json())  # the receiver's parser accepts it, unchanged
        if again != message:
            raise SystemExit(f"example of {type(message).__name__} does not survive a parse")
        by_class[type(message)] = message
    missing = [cls.__name__ for cls in ALL_MESSAGES if cls not in by_class]
    if missing:
        raise SystemExit(f"scripts/gen_protocol.py has no example for: {', '.join(missing)}")
    return by_class


EXAMPLE_QUERIES: dict[type[Query], Query] = {
    RunListQuery: RunListQuery(task_id=TASK, status="failed", since_ms=T0, limit=20),
    RunOutputQuery: RunOutputQuery(attempt=1, after=41),
    ProjectListQuery: ProjectListQuery(run_id_prefix="e0000000"),
    tc.SchedulePreviewQuery: tc.SchedulePreviewQuery(cron="30 2 * * *", timezone="Europe/Berlin", count=2),
    NotifyDeliveriesQuery: NotifyDeliveriesQuery(rule="ops-hook", limit=20),
}

# -- describing declared fields ------------------------------------------------------------------


def number(n: int) -> str:
    named = {MAX_SAFE_INTEGER: "2^53-1", MAX_SAFE_INTEGER - 1: "2^53-2", 2**31 - 1: "2^31-1"}
    return named.get(n, str(n))


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def code(text: str) -> str:
    return f"`{text}`"


def describe(spec: Spec) -> tuple[str, str]:
    """(JSON type, bounds/pattern) of one declared value spec."""
    if isinstance(spec, Int):
        return "integer", f"{number(spec.lo)}..{number(spec.hi)}"
    if isinstance(spec, Uuid):
        return "string (uuid)", "canonical lower-case 8-4-4-4-12"
    if isinstance(spec, Token):
        return "string (secret)", "32 bytes as base64url without padding (43 characters)"
    if isinstance(spec, Enum):
        if len(spec.values) == 1:
            return "string", f"always {code(spec.values[0])}"
        return "string (enum)", "one of " + ", ".join(code(v) for v in spec.values)
    if isinstance(spec, Bool):
        return "boolean", ""
    if isinstance(spec, Null):
        return "null", "always null"
    if isinstance(spec, Base64Bytes):
        return "string (base64)", f"padded standard base64 of {spec.min_bytes}..{spec.max_bytes} bytes"
    if isinstance(spec, Str):
        rule = f"{spec.min_len}..{spec.max_len} characters"
        return "string", rule + (f", pattern {code(spec.pattern)}" if spec.pattern else "")
    if isinstance(spec, Nested):
        name = spec.record.__name__
        return "object", f"[{name}](#{name.lower()})"
    if isinstance(spec, List):
        item_type, item_rule = describe(spec.item)
        item = item_rule if isinstance(spec.item, Nested) else f"{item_type}, {item_rule}".rstrip(", ")
        return "array", f"{spec.min_items}..{spec.max_items} items, each {item}"
    if isinstance(spec, Map):
        _key_type, key_rule = describe(spec.key)
        value_type, value_rule = describe(spec.value)
        return "object (map)", f"0..{spec.max_items} entries; keys: {key_rule}; values: {value_type}, {value_rule}"
    raise TypeError(f"no description for {spec!r}")


def presence(f: Field) -> str:
    if f.nullable:
        return "required, may be null"
    if f.optional:
        return "optional (absent or a value, never null)"
    return "required"


def notes(f: Field) -> str:
    out = []
    if f.secret:
        out.append("secret: never logged")
    if f.from_shell:
        out.append("added by the shell, not the database")
    return "; ".join(out)


def field_table(cls: type[Record]) -> list[str]:
    rows = ["| JSON name | type | bounds / pattern | presence | notes |", "| --- | --- | --- | --- | --- |"]
    if issubclass(cls, Message):
        rows.append(f"| `schema` | string | always {code(cls.SCHEMA)} | required | |")
    for f in cls.FIELDS:
        kind, rule = describe(f.spec)
        rows.append(f"| {code(f.name)} | {kind} | {cell(rule)} | {presence(f)} | {notes(f)} |")
    for group in cls.REQUIRE_ANY:
        names = ", ".join(code(f.name) for f in cls.FIELDS if f.attr in group)
        rows.append("")
        rows.append(f"At least one of {names} must not be null.")
    return rows


def nested_records(messages: Sequence[type[Message]]) -> list[type[Record]]:
    """Every Record reachable from the messages, in order of first appearance."""
    seen: list[type[Record]] = []

    def walk(spec: Spec) -> Iterator[type[Record]]:
        if isinstance(spec, Nested):
            yield spec.record
            for f in spec.record.FIELDS:
                yield from walk(f.spec)
        elif isinstance(spec, List):
            yield from walk(spec.item)
        elif isinstance(spec, Map):
            yield from walk(spec.value)

    for cls in messages:
        for f in cls.FIELDS:
            for record in walk(f.spec):
                if record not in seen:
                    seen.append(record)
    return seen


def doc(obj: object) -> str:
    return inspect.cleandoc(obj.__doc__ or "")


def module_text(module: ModuleType) -> str:
    """The module docstring without its title line."""
    lines = doc(module).splitlines()
    return "\n".join(lines[1:]).strip()


def cap_text(cap: int) -> str:
    return f"{cap} bytes ({cap // KIB} KiB)" if cap % KIB == 0 else f"{cap} bytes"


def example_json(message: Message) -> list[str]:
    text = json.dumps(message.to_obj(), indent=2, sort_keys=True, ensure_ascii=False)
    return ["```json", text, "```"]


# -- routes ------------------------------------------------------------------------------------


def requests_of(route: Route) -> list[type[Message]]:
    if route.request is None:
        return []
    found = {route.request({"phase": phase}) for phase in PHASES}
    return sorted(found, key=lambda cls: cls.__name__)


def responses_of(route: Route) -> list[type[Message]]:
    if isinstance(route.response, Variants):
        return list(route.response.by_status.values())
    return [route.response]


def family_of(cls: type[Message]) -> Family:
    for family in FAMILIES:
        if cls.__module__ == family.module.__name__:
            return family
    raise SystemExit(f"{cls.__name__} belongs to no family of scripts/gen_protocol.py")


def route_family(route: Route) -> Family:
    return family_of((requests_of(route) or responses_of(route))[0])


def success_status(route: Route, cls: type[Message]) -> str:
    status = cls.field("status").spec if any(f.name == "status" for f in cls.FIELDS) else None
    values = status.values if isinstance(status, Enum) else ()
    if any(v in route.accepted for v in values):
        return "202"
    return "200"


def route_table(routes: Sequence[Route]) -> list[str]:
    rows = [
        "| method | path | ql_api function | audience | permission | request | responses |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for route in routes:
        request = ", ".join(f"[{c.__name__}](#{c.__name__.lower()})" for c in requests_of(route)) or "no body"
        if route.query is not None:
            request += f"; query [{route.query.__name__}](#{route.query.__name__.lower()})"
        responses = ", ".join(
            f"{success_status(route, c)} [{c.__name__}](#{c.__name__.lower()})" for c in responses_of(route)
        )
        rows.append(
            f"| {route.method} | {code(route.path)} | `ql_api.{route.function}` | {route.audience} "
            f"| {code(route.permission) if route.permission else ''} | {request} | {responses} |"
        )
    return rows


def directions(cls: type[Message]) -> str:
    sent: list[str] = []
    for route in ROUTES:
        where = f"`{route.method} {route.path}`"
        if cls in requests_of(route):
            sent.append(f"request body of {where}")
        if cls in responses_of(route):
            sent.append(f"response ({success_status(route, cls)}) of {where}")
    if cls is ErrorMessage:
        sent.append("the body of every non-2xx answer of every route")
    return "; ".join(sent) or "not used by any route"


# -- error codes: the table of qinglong.wire.errors ------------------------------------------------

SCOPES: dict[Scope, str] = {
    "any": "any route",
    "body": "a route with a body",
    "worker": "Worker routes",
    "input": "a route with a body or query parameters",
    "signed": "signed Worker routes",
    "user": "user routes",
    "sealing": "routes that seal or open secret values (a set; activation)",
    "unrouted": "no route (a path's other methods)",
}


def answer(name: str) -> str:
    """An error code with its HTTP status, as the text names it."""
    return f"{ERRORS[name].status} {code(name)}"


def error_table() -> list[str]:
    rows = ["| HTTP | code | answered by | meaning |", "| --- | --- | --- | --- |"]
    for error in sorted(ERRORS.values(), key=lambda e: e.status):
        rows.append(f"| {error.status} | {code(error.code)} | {SCOPES[error.scope]} | {cell(error.meaning)} |")
    return rows


# -- query parameters --------------------------------------------------------------------------


def query_text(cls: type[Query]) -> list[str]:
    """The parameters of a GET's query string: the rules of qinglong.wire.query, and the field table."""
    example = EXAMPLE_QUERIES[cls]
    if cls.parse(example.to_query()) != example:  # the shell's parser accepts the example, unchanged
        raise SystemExit(f"example of {cls.__name__} does not survive a parse")
    rows = field_table(cls)
    rows = [rows[0].replace("JSON name", "parameter"), *rows[1:]]
    return [
        f"- query parameters of {', '.join(f'`{r.method} {r.path}`' for r in ROUTES if r.query is cls)}",
        f"- at most {cls.CAP} characters of `name=value` pairs joined by `&`, percent-encoded UTF-8; integers in",
        "  plain decimal digits. Refused with the codes a body's fields get: an unknown or repeated parameter",
        f"  ({answer('wire.unknown_field')}, {answer('wire.duplicate_key')}), a value outside its rules.",
        "",
        *rows,
        "",
        "Example: `?" + example.to_query() + "`",
    ]


# -- ql3w ----------------------------------------------------------------------------------------


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def ql3w_section(heartbeat: Message) -> list[str]:
    path = f"/api/v3/workers/{WORKER}/sessions/{SESSION}/heartbeat"
    body = heartbeat.to_json()
    ts = T0 // 1000
    key = b64url_decode(SESSION_KEY)
    kid = ql3w.key_id(b"an example cluster secret of 32+ bytes")
    header = ql3w.authorization(
        key, worker_id=WORKER, session_id=SESSION, generation=1, method="POST", path=path, body=body, now=ts,
        key_id=kid,
    )  # fmt: skip
    canonical = ql3w.canonical_request("POST", path, body, ts).decode()
    ql3w.parse(header)  # the shell's parser accepts the header
    return [
        "## Signing worker requests: `ql3w`",
        "",
        "A session is opened with the client certificate alone. Every later Worker request carries:",
        "",
        "```",
        "Authorization: ql3w worker=<uuid>, session=<uuid>, gen=<int>, kid=<key id>, ts=<unix seconds>,"
        " sig=<base64url>",
        'sig         = HMAC-SHA256(session_key, "ql3w\\n" + METHOD + "\\n" + path + "\\n"'
        ' + sha256hex(body) + "\\n" + ts)',
        'session_key = HMAC-SHA256(cluster_secret, "ql3w-session\\n" + session + "\\n" + worker + "\\n" + gen)',
        "```",
        "",
        "- `worker` and `session` must equal the `{workerId}` and `{sessionId}` of the path, and the client",
        "  certificate's SAN URI `urn:qinglong:worker:<uuid>` must name the same Worker.",
        "- `gen` is the Worker generation the session was opened under; a body that names another",
        "  `workerGeneration` is refused with `fenced.stale_generation`.",
        "- `path` is the request path exactly as sent (no query string, no origin); `sha256hex(body)` is the",
        "  lower-case hex SHA-256 of the exact body bytes sent; `sig` is base64url without padding (43 characters).",
        f"- `ts` must be within ±{ql3w.SKEW_SECONDS} s of the shell's clock (`auth.expired_timestamp` otherwise).",
        "- The Worker receives `sessionKey` (base64url) in the session-open answer and signs with its 32",
        "  decoded bytes. The shell derives the key from the cluster secret, so any shell replica verifies",
        "  a request without shared state, and the database never holds the key.",
        f"- `kid` is the 12-character key id the session-open answer carries in its `{ql3w.KEY_ID_HEADER}` header:",
        "  it names the cluster secret the session key was derived from (a shell holds the current secret and,",
        "  during a rotation, one more it accepts). A header without `kid` names the shell's current secret",
        "  (what a Worker sends when the shell named none). A `kid` the shell does not hold is `auth.bad_signature`.",
        f"- An answer to a request verified under the accepted, not current, secret carries `{ql3w.REKEY_HEADER}: 1`:",
        "  the Worker opens a new session (which replaces this one; its Attempts are not fenced) before its next call.",
        "",
        "Test vector (fake key, the heartbeat example below):",
        "",
        "```",
        f"session key (base64url): {SESSION_KEY}",
        f"POST {path}",
        f"body: {body.decode()}",
        "canonical request (\\n shown as line breaks):",
        *canonical.split("\n"),
        f"Authorization: {header}",
        "```",
    ]


# -- the document --------------------------------------------------------------------------------


def render() -> str:
    samples = examples()
    records = nested_records(ALL_MESSAGES)
    out: list[str] = [
        "# Qinglong wire protocol",
        "",
        "<!-- GENERATED by scripts/gen_protocol.py from qinglong.wire and qinglong.shell.routes.",
        "     Do not edit: run `python scripts/gen_protocol.py`. A unit test fails on drift. -->",
        "",
        "Every body on the worker ingress and the user API is one JSON object with a `schema` field naming",
        "its message family. One definition per message (`qinglong.wire`) is used by the sender and the",
        "receiver. This document lists each family's routes, each message's byte cap and fields, and one",
        "example. Example ids, tokens and keys are fake.",
        "",
        "## Rules for every body",
        "",
        "- `Content-Type: application/json`, UTF-8: the one parameter allowed is `charset=utf-8` (names and",
        "  values in any case). Anything else, and any `Content-Encoding` but `identity` (gzip, deflate, br…),",
        f"  is refused before a byte of the body is read ({answer('request.unsupported_media_type')}): the",
        "  shell never decodes a body, so the byte caps and the `ql3w` body hash are over the bytes sent.",
        f"- The byte cap of the message is checked before decoding ({answer('request.too_large')}).",
        "- Refused: a top level that is not an object, duplicate keys at any depth, unknown or missing",
        "  fields, a wrong `schema`, unknown enum values, integers outside"
        f" ±{number(MAX_SAFE_INTEGER)} (and outside each field's bounds),",
        "  floats where an integer is declared, booleans for integers, non-canonical uuids, control",
        f"  characters and U+2028/U+2029 in any string or key, invalid UTF-8, nesting deeper than {MAX_DEPTH}.",
        "- `required, may be null` fields are always present; `optional` fields may be absent and are never null.",
        "- Every `…AtMs` field is milliseconds since the Unix epoch, read from the database clock.",
        "- Answers are canonical JSON (sorted keys, no spaces). The shell checks every database result",
        "  against the response contract; a result outside it is a"
        f" {answer('internal.bad_projection')}, never forwarded.",
        "- Raw lease tokens, session keys and Project secret values travel only where a table below marks a",
        "  field `secret`, and none of them is ever logged. Of a token or key only its SHA-256 reaches the",
        "  database; a secret value reaches it only sealed by the shell (AES-256-GCM under keys it never holds).",
        "",
        "Audiences:",
        "",
        *(f"- `{name}`: {text}" for name, text in AUDIENCES.items()),
        "",
        "## All routes",
        "",
        *route_table(ROUTES),
        "",
        "`{phase}` is one of " + ", ".join(code(p) for p in PHASES) + "; `start-failure` takes"
        " [ActivationStartFailureRequest](#activationstartfailurerequest), the others"
        " [ActivationRequest](#activationrequest).",
        "",
        "Worker routes are served on the worker-ingress listener (TLS 1.3, client certificate required);",
        "user routes on the user-API listener (TLS 1.3), which also serves `GET /openapi.json`.",
        "",
    ]
    out += ql3w_section(samples[WorkerSessionHeartbeatRequest])
    out.append("")
    for number_, family in enumerate(FAMILIES, start=1):
        messages = [cls for cls in ALL_MESSAGES if family_of(cls) is family]
        routes = [r for r in ROUTES if route_family(r) is family]
        out += [f"## {number_}. {family.title}: `{family.schema}`", "", module_text(family.module), ""]
        if routes:
            out += [*route_table(routes), ""]
            if any("{phase}" in r.path for r in routes):
                out += ["`{phase}` is one of " + ", ".join(code(p) for p in PHASES) + ".", ""]
        for query in dict.fromkeys(r.query for r in routes if r.query is not None):
            out += [f"### {query.__name__}", "", doc(query), "", *query_text(query), ""]
        for cls in messages:
            out += [
                f"### {cls.__name__}",
                "",
                doc(cls),
                "",
                f"- schema `{cls.SCHEMA}`, at most {cap_text(cls.CAP)}",
                f"- {directions(cls)}",
                "",
                *field_table(cls),
                "",
                *example_json(samples[cls]),
                "",
            ]
    out += ["## Nested objects", ""]
    for record in records:
        out += [f"### {record.__name__}", "", doc(record), "", *field_table(record), ""]
    out += [
        "## Error codes",
        "",
        "Every non-2xx answer is an [ErrorMessage](#errormessage) (`qinglong/error@v1`) whose `code` is one of",
        "these, stable across releases, and its HTTP status is the code's. Database outcomes map by rule:",
        "`fenced` + reason is `fenced.<reason>`, `invalid` + reason is `invalid.<reason>`, `not_found` is",
        "`not_found`, and the policy fence's `approval_required` is the code `approval_required`. A missing",
        "object and one of another Project or Worker look the same. A signed Worker route is every Worker",
        "route but session open; `qinglong.wire.errors.ERRORS` is the table, and the OpenAPI document lists",
        "under each route the statuses and codes it can answer (and, under `components.responses`, those",
        "no route answers). A request that does not parse, or whose head is over the listener's budget, is",
        "answered and its connection closed.",
        "",
        *error_table(),
        "",
    ]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate docs/protocol.md from qinglong.wire")
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/protocol.md is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.is_file() else ""
        if current != text:
            print(f"{OUTPUT.relative_to(ROOT)} is out of date: run `python scripts/gen_protocol.py`", file=sys.stderr)
            return 1
        return 0
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
