"""qinglong.wire: the exact wire contracts shared by the shell and the Worker. Touches nothing: pure
declarations and functions (standard library only, so a router-class Worker can import it).

One definition per message, used by the sender and the receiver: `Msg.parse(bytes)`,
`Msg.from_obj(dict)`, `Msg.from_result(sql_result, **shell_fields)`, `msg.to_obj()`,
`msg.to_json()`, class-level `SCHEMA` and `CAP`. Every refusal is a `WireError(code, message)`.
"""

from __future__ import annotations

from typing import Final

from qinglong.wire import (
    activation,
    cancellation,
    completion,
    enqueue,
    errors,
    lease_control,
    offer,
    output,
    project,
    ql3w,
    run_list,
    session,
    tasks,
    timeline,
)
from qinglong.wire.activation import (
    ACTIVATION_SCHEMA,
    ActivationRequest,
    ActivationResponse,
    ActivationStartFailureRequest,
    Executor,
    Snapshot,
)
from qinglong.wire.cancellation import (
    CANCELLATION_RESPONSES,
    CANCELLATION_SCHEMA,
    CancellationAccepted,
    CancellationAlreadyRequested,
    CancellationAlreadyTerminal,
    CancellationRequest,
    CancellationResponse,
    parse_cancellation_response,
)
from qinglong.wire.codec import KIB, MAX_DEPTH, MAX_SAFE_INTEGER, WIRE_CODES, WireError, decode, encode
from qinglong.wire.common import ArtifactReceipt, AttemptFence
from qinglong.wire.completion import (
    ARTIFACT_MAX_BYTES,
    COMPLETION_SCHEMA,
    ArtifactStored,
    ArtifactUploadRequest,
    CompletionArtifact,
    CompletionRequest,
    CompletionResponse,
)
from qinglong.wire.enqueue import (
    ENQUEUE_RESPONSES,
    ENQUEUE_SCHEMA,
    EnqueueRequest,
    EnqueueResponse,
    RunAlreadyEnqueued,
    RunEnqueued,
)
from qinglong.wire.errors import (
    ERROR_CODES,
    ERROR_SCHEMA,
    ErrorMessage,
    error_from_wire_error,
    outcome_code,
)
from qinglong.wire.fields import Message, Record, Variants
from qinglong.wire.lease_control import (
    LEASE_CONTROL_RESPONSES,
    LEASE_CONTROL_SCHEMA,
    LeaseControlRequest,
    LeaseControlResponse,
    LeaseRenewed,
    LeaseStopRequested,
    LeaseTerminal,
    check_lease_version,
    parse_lease_control_response,
)
from qinglong.wire.offer import (
    OFFER_RESPONSES,
    OFFER_SCHEMA,
    Offer,
    OfferEmpty,
    OfferOffered,
    OfferPullRequest,
    OfferResponse,
    Plan,
    parse_offer_response,
)
from qinglong.wire.output import (
    OUTPUT_SCHEMA,
    OutputAppended,
    OutputAppendRequest,
    RunOutput,
    RunOutputQuery,
)
from qinglong.wire.project import PROJECT_VIEW_SCHEMA, ProjectView, ProjectWorker, ProjectWorkers
from qinglong.wire.query import Query
from qinglong.wire.run_list import RUN_LIST_SCHEMA, RunList, RunListQuery, RunSummary
from qinglong.wire.session import (
    SESSION_SCHEMA,
    WorkerSessionAlive,
    WorkerSessionHeartbeatRequest,
    WorkerSessionOpened,
    WorkerSessionOpenRequest,
)
from qinglong.wire.tasks import TASK_LIST_SCHEMA, TaskList, TaskSchedule, TaskSummary
from qinglong.wire.timeline import TIMELINE_SCHEMA, RunProjection, RunTimeline, TimelineEvent

ALL_MESSAGES: Final[tuple[type[Message], ...]] = (
    *session.MESSAGES,
    *offer.MESSAGES,
    *activation.MESSAGES,
    *lease_control.MESSAGES,
    *completion.MESSAGES,
    *cancellation.MESSAGES,
    *enqueue.MESSAGES,
    *timeline.MESSAGES,
    *run_list.MESSAGES,
    *output.MESSAGES,
    *tasks.MESSAGES,
    *project.MESSAGES,
    *errors.MESSAGES,
)

__all__ = [
    "ACTIVATION_SCHEMA",
    "ALL_MESSAGES",
    "ARTIFACT_MAX_BYTES",
    "CANCELLATION_RESPONSES",
    "CANCELLATION_SCHEMA",
    "COMPLETION_SCHEMA",
    "ENQUEUE_RESPONSES",
    "ENQUEUE_SCHEMA",
    "ERROR_CODES",
    "ERROR_SCHEMA",
    "KIB",
    "LEASE_CONTROL_RESPONSES",
    "LEASE_CONTROL_SCHEMA",
    "MAX_DEPTH",
    "MAX_SAFE_INTEGER",
    "OFFER_RESPONSES",
    "OFFER_SCHEMA",
    "OUTPUT_SCHEMA",
    "PROJECT_VIEW_SCHEMA",
    "RUN_LIST_SCHEMA",
    "SESSION_SCHEMA",
    "TASK_LIST_SCHEMA",
    "TIMELINE_SCHEMA",
    "WIRE_CODES",
    "ActivationRequest",
    "ActivationResponse",
    "ActivationStartFailureRequest",
    "ArtifactReceipt",
    "ArtifactStored",
    "ArtifactUploadRequest",
    "AttemptFence",
    "CancellationAccepted",
    "CancellationAlreadyRequested",
    "CancellationAlreadyTerminal",
    "CancellationRequest",
    "CancellationResponse",
    "CompletionArtifact",
    "CompletionRequest",
    "CompletionResponse",
    "EnqueueRequest",
    "EnqueueResponse",
    "ErrorMessage",
    "Executor",
    "LeaseControlRequest",
    "LeaseControlResponse",
    "LeaseRenewed",
    "LeaseStopRequested",
    "LeaseTerminal",
    "Message",
    "Offer",
    "OfferEmpty",
    "OfferOffered",
    "OfferPullRequest",
    "OfferResponse",
    "OutputAppendRequest",
    "OutputAppended",
    "Plan",
    "ProjectView",
    "ProjectWorker",
    "ProjectWorkers",
    "Query",
    "Record",
    "RunAlreadyEnqueued",
    "RunEnqueued",
    "RunList",
    "RunListQuery",
    "RunOutput",
    "RunOutputQuery",
    "RunProjection",
    "RunSummary",
    "RunTimeline",
    "Snapshot",
    "TaskList",
    "TaskSchedule",
    "TaskSummary",
    "TimelineEvent",
    "Variants",
    "WireError",
    "WorkerSessionAlive",
    "WorkerSessionHeartbeatRequest",
    "WorkerSessionOpenRequest",
    "WorkerSessionOpened",
    "check_lease_version",
    "decode",
    "encode",
    "error_from_wire_error",
    "outcome_code",
    "parse_cancellation_response",
    "parse_lease_control_response",
    "parse_offer_response",
    "ql3w",
]
