"""Tests of the package surface (qinglong.wire). Touches nothing; reads wire/*.py.

The schema table, the caps, where secrets (lease tokens, session keys, Project secret values) may travel, and that
the package stays standard-library only.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import qinglong.wire as wire_pkg
from qinglong.wire import (
    ALL_MESSAGES,
    ActivationRequest,
    ActivationResponse,
    ActivationStartFailureRequest,
    ArtifactStored,
    ArtifactUploadRequest,
    AttemptFence,
    CancellationAccepted,
    CancellationAlreadyRequested,
    CancellationAlreadyTerminal,
    CancellationRequest,
    CompletionRequest,
    CompletionResponse,
    EnqueueRequest,
    ErrorMessage,
    LeaseControlRequest,
    LeaseRenewed,
    LeaseStopRequested,
    LeaseTerminal,
    Message,
    OfferEmpty,
    OfferOffered,
    OfferPullRequest,
    OutputAppended,
    OutputAppendRequest,
    OutputLost,
    OutputLostRequest,
    ProjectList,
    ProjectView,
    ProjectWorkers,
    Record,
    RunAlreadyEnqueued,
    RunEnqueued,
    RunList,
    RunOutput,
    RunTimeline,
    SecretAlreadyDeleted,
    SecretAlreadySet,
    SecretDeleted,
    SecretDeleteRequest,
    SecretList,
    SecretSet,
    SecretSetRequest,
    TaskList,
    WorkerSessionAlive,
    WorkerSessionHeartbeatRequest,
    WorkerSessionOpened,
    WorkerSessionOpenRequest,
)
from qinglong.wire import task_change as tc
from qinglong.wire.activation import DeliveredSecret
from qinglong.wire.bundle_fetch import BundleChunk, BundleChunkRequest
from qinglong.wire.fields import Base64Bytes, List, Nested, Token
from qinglong.wire.notify import (
    NotifyDeliveries,
    NotifyRuleList,
    NotifyRuleRemoved,
    NotifyRuleRemoveRequest,
    NotifyRuleSet,
    NotifyRuleSetRequest,
)

WIRE = Path(wire_pkg.__file__).resolve().parent
KIB = 1024

CAPS: dict[type[Message], tuple[str, int]] = {
    WorkerSessionOpenRequest: ("qinglong/worker-session@v1", 4 * KIB),
    WorkerSessionOpened: ("qinglong/worker-session@v1", 4 * KIB),
    WorkerSessionHeartbeatRequest: ("qinglong/worker-session@v1", 4 * KIB),
    WorkerSessionAlive: ("qinglong/worker-session@v1", 4 * KIB),
    OfferPullRequest: ("qinglong/remote-offer@v1", 4 * KIB),
    OfferOffered: ("qinglong/remote-offer@v1", 128 * KIB),
    OfferEmpty: ("qinglong/remote-offer@v1", 128 * KIB),
    ActivationRequest: ("qinglong/remote-run-activation@v1", 4 * KIB),
    ActivationStartFailureRequest: ("qinglong/remote-run-activation@v1", 4 * KIB),
    # a full snapshot fits 16 KiB; 16 secrets of 64 KiB in base64 (87,384 characters), 88 KiB each with their names
    ActivationResponse: ("qinglong/remote-run-activation@v1", 16 * KIB + 16 * 88 * KIB),
    LeaseControlRequest: ("qinglong/remote-worker-lease-control@v1", 8 * KIB),
    LeaseRenewed: ("qinglong/remote-worker-lease-control@v1", 4 * KIB),
    LeaseStopRequested: ("qinglong/remote-worker-lease-control@v1", 4 * KIB),
    LeaseTerminal: ("qinglong/remote-worker-lease-control@v1", 4 * KIB),
    CompletionRequest: ("qinglong/remote-run-completion@v1", 4 * KIB),
    CompletionResponse: ("qinglong/remote-run-completion@v1", 16 * KIB),
    ArtifactUploadRequest: ("qinglong/remote-run-completion@v1", 1536 * KIB),
    ArtifactStored: ("qinglong/remote-run-completion@v1", 4 * KIB),
    CancellationRequest: ("qinglong/run-cancellation@v1", 4 * KIB),
    CancellationAccepted: ("qinglong/run-cancellation@v1", 4 * KIB),
    CancellationAlreadyRequested: ("qinglong/run-cancellation@v1", 4 * KIB),
    CancellationAlreadyTerminal: ("qinglong/run-cancellation@v1", 4 * KIB),
    EnqueueRequest: ("qinglong/run-enqueue@v1", 4 * KIB),
    RunEnqueued: ("qinglong/run-enqueue@v1", 4 * KIB),
    RunAlreadyEnqueued: ("qinglong/run-enqueue@v1", 4 * KIB),
    RunTimeline: ("qinglong/run-timeline@v1", 128 * KIB),
    RunList: ("qinglong/run-list@v1", 64 * KIB),
    OutputAppendRequest: ("qinglong/run-output@v1", 352 * KIB),
    BundleChunkRequest: ("qinglong/bundle-fetch@v1", 4 * KIB),
    BundleChunk: ("qinglong/bundle-fetch@v1", 4 * 256 * KIB // 3 + 4 * KIB),
    OutputAppended: ("qinglong/run-output@v1", 1 * KIB),
    OutputLostRequest: ("qinglong/run-output@v1", 4 * KIB),
    OutputLost: ("qinglong/run-output@v1", 1 * KIB),
    RunOutput: ("qinglong/run-output@v1", 4 * 256 * KIB // 3 + 256 * KIB),
    TaskList: ("qinglong/task-list@v1", 2048 * KIB),
    ProjectView: ("qinglong/project-view@v1", 2 * KIB),
    ProjectWorkers: ("qinglong/project-view@v1", 256 * KIB),
    ProjectList: ("qinglong/project-list@v1", 256 * KIB),
    SecretSetRequest: ("qinglong/secret@v1", 96 * KIB),
    SecretSet: ("qinglong/secret@v1", 4 * KIB),
    SecretAlreadySet: ("qinglong/secret@v1", 4 * KIB),
    SecretDeleteRequest: ("qinglong/secret@v1", 4 * KIB),
    SecretDeleted: ("qinglong/secret@v1", 4 * KIB),
    SecretAlreadyDeleted: ("qinglong/secret@v1", 4 * KIB),
    SecretList: ("qinglong/secret@v1", 512 * KIB),
    tc.TaskRevisionRequest: ("qinglong/task@v1", 256 * KIB),
    tc.TaskCreated: ("qinglong/task@v1", 4 * KIB),
    tc.TaskRevised: ("qinglong/task@v1", 4 * KIB),
    tc.TaskRevisionReplayed: ("qinglong/task@v1", 4 * KIB),
    tc.TaskStatusRequest: ("qinglong/task@v1", 1 * KIB),
    tc.TaskEnabled: ("qinglong/task@v1", 4 * KIB),
    tc.TaskDisabled: ("qinglong/task@v1", 4 * KIB),
    tc.TaskScheduleRequest: ("qinglong/task@v1", 1 * KIB),
    tc.TaskScheduleSet: ("qinglong/task@v1", 4 * KIB),
    tc.TaskScheduleUnchanged: ("qinglong/task@v1", 4 * KIB),
    tc.TaskScheduleCleared: ("qinglong/task@v1", 4 * KIB),
    tc.SchedulePreview: ("qinglong/schedule-preview@v1", 8 * KIB),
    NotifyRuleSetRequest: ("qinglong/notify@v1", 16 * KIB),
    NotifyRuleSet: ("qinglong/notify@v1", 4 * KIB),
    NotifyRuleRemoveRequest: ("qinglong/notify@v1", 4 * KIB),
    NotifyRuleRemoved: ("qinglong/notify@v1", 4 * KIB),
    NotifyRuleList: ("qinglong/notify@v1", 4096 * KIB),
    NotifyDeliveries: ("qinglong/notify@v1", 8192 * KIB),
    ErrorMessage: ("qinglong/error@v1", 4 * KIB),
}
REQUESTS: set[type[Message]] = {
    WorkerSessionOpenRequest,
    WorkerSessionHeartbeatRequest,
    OfferPullRequest,
    ActivationRequest,
    ActivationStartFailureRequest,
    LeaseControlRequest,
    CompletionRequest,
    ArtifactUploadRequest,
    CancellationRequest,
    EnqueueRequest,
    OutputAppendRequest,
    OutputLostRequest,
    BundleChunkRequest,
    SecretSetRequest,
    SecretDeleteRequest,
    tc.TaskRevisionRequest,
    tc.TaskStatusRequest,
    tc.TaskScheduleRequest,
}
# pages for the CLI and the console, never for a Worker
USER_READS: set[type[Message]] = {
    RunOutput,
    TaskList,
    ProjectWorkers,
    ProjectList,
    SecretList,
    NotifyRuleList,
    NotifyDeliveries,
}
# the Worker answers over 128 KiB: a starting ACK's answer delivers the secret values its plan names, a fetch a
# bundle's chunk
DELIVERIES: set[type[Message]] = {ActivationResponse, BundleChunk}


def test_every_message_has_its_schema_and_cap() -> None:
    assert set(ALL_MESSAGES) == set(CAPS) and len(ALL_MESSAGES) == len(CAPS)
    assert {cls: (cls.SCHEMA, cls.CAP) for cls in ALL_MESSAGES} == CAPS
    worker_requests = REQUESTS - {
        CancellationRequest,
        EnqueueRequest,
        LeaseControlRequest,
        ArtifactUploadRequest,
        OutputAppendRequest,
        SecretSetRequest,
        SecretDeleteRequest,
        tc.TaskRevisionRequest,
        tc.TaskStatusRequest,
        tc.TaskScheduleRequest,
        NotifyRuleSetRequest,
        NotifyRuleRemoveRequest,
    }
    assert all(cls.CAP == 4 * KIB for cls in worker_requests)
    assert all(cls.CAP <= 128 * KIB for cls in ALL_MESSAGES if cls not in REQUESTS | USER_READS | DELIVERIES)


def _tokens(cls: type[Record]) -> set[str]:
    found = set()
    for f in cls.FIELDS:
        spec = f.spec.item if isinstance(f.spec, List) else f.spec
        if isinstance(spec, Token):
            found.add(f.name)
        if isinstance(spec, Nested):
            found |= _tokens(spec.record)
    return found


def test_lease_tokens_travel_only_in_the_offer_and_in_requests_and_secrets_never_show() -> None:
    carriers = {cls for cls in ALL_MESSAGES if "leaseToken" in _tokens(cls)}
    assert carriers == {OfferOffered} | {cls for cls in REQUESTS if issubclass(cls, AttemptFence)}
    others = {cls: _tokens(cls) for cls in ALL_MESSAGES if cls not in carriers and _tokens(cls)}
    assert others == {WorkerSessionOpened: {"sessionKey"}}
    for cls in ALL_MESSAGES:
        assert all(f.secret for f in cls.FIELDS if isinstance(f.spec, Token))


def _base64_fields(cls: type[Record], at: str = "") -> dict[str, bool]:
    """Every bytes field reachable from a record, by its path, with whether it is marked secret."""
    found: dict[str, bool] = {}
    for f in cls.FIELDS:
        spec = f.spec.item if isinstance(f.spec, List) else f.spec
        if isinstance(spec, Base64Bytes):
            found[f"{at}{f.name}"] = f.secret
        if isinstance(spec, Nested):
            found |= _base64_fields(spec.record, f"{at}{f.name}.")
    return found


def test_secret_values_travel_only_in_a_set_and_in_a_starting_ack_s_answer_and_never_show() -> None:
    """A Project secret's value crosses the wire in two places only, each field marked secret (out of repr): the
    body of a set, and the value delivered to a Worker. No answer to a user carries bytes of it."""
    hidden = {(cls, path) for cls in ALL_MESSAGES for path, secret in _base64_fields(cls).items() if secret}
    assert hidden == {
        (SecretSetRequest, "value"),
        (ActivationResponse, "secrets.value"),
        (ArtifactUploadRequest, "contentBase64"),  # task output and artifacts may hold anything: never logged
        (OutputAppendRequest, "dataBase64"),
    }
    assert DeliveredSecret.field("value").secret
    user_answers = {cls for cls in ALL_MESSAGES if cls.SCHEMA == "qinglong/secret@v1" and cls not in REQUESTS}
    assert len(user_answers) == 5 and all(_base64_fields(cls) == {} for cls in user_answers)


def test_the_public_api_is_exported() -> None:
    missing = [name for name in wire_pkg.__all__ if not hasattr(wire_pkg, name)]
    assert not missing
    assert len(set(wire_pkg.__all__)) == len(wire_pkg.__all__)


def test_the_package_uses_the_standard_library_only() -> None:
    """But for signing.py, which needs `cryptography` (Ed25519) and which nothing imports at import time."""
    for path in sorted(WIRE.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                allowed = ("__future__", "qinglong", *(("cryptography",) if path.name == "signing.py" else ()))
                assert top in sys.stdlib_module_names or top in allowed, (path.name, name)


def test_every_module_says_what_it_touches_and_stays_small() -> None:
    for path in sorted(WIRE.glob("*.py")):
        text = path.read_text()
        tree = ast.parse(text)
        doc = ast.get_docstring(tree)
        assert doc and "Touches nothing" in doc.splitlines()[0], path.name
        assert "from __future__ import annotations" in text, path.name
        assert len(text.splitlines()) <= 400, path.name
