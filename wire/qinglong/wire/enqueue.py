"""qinglong/run-enqueue@v1: a user queues a Run of a task. Touches nothing: declarations.

The body names the task and the caller's idempotency key. The answer is ql_api.run_enqueue_v1's result:
`enqueued` (202, this call queued the Run, pinned to the task's current revision) or `already_enqueued`
(200, the same mutation replayed: the same Run). Fences, denials and not-found travel as
qinglong/error@v1.
"""

from __future__ import annotations

from typing import Final, Literal

from qinglong.wire.cancellation import MUTATION_ID_PATTERN
from qinglong.wire.codec import KIB
from qinglong.wire.common import TIME_MS
from qinglong.wire.fields import Enum, Message, Str, Uuid, Variants, wire

ENQUEUE_SCHEMA: Final = "qinglong/run-enqueue@v1"


class EnqueueRequest(Message):
    """Body of an enqueue: the task and the caller's mutation id (1..128 of [A-Za-z0-9._:-])."""

    SCHEMA = ENQUEUE_SCHEMA
    CAP = 4 * KIB

    mutation_id: str = wire(Str(128, min_len=1, pattern=MUTATION_ID_PATTERN))
    task_id: str = wire(Uuid())


class RunEnqueued(Message):
    """This call queued the Run."""

    SCHEMA = ENQUEUE_SCHEMA
    CAP = 4 * KIB

    status: Literal["enqueued"] = wire(Enum(("enqueued",)), default="enqueued")
    run_id: str = wire(Uuid())
    task_revision_id: str = wire(Uuid())
    queued_at_ms: int = wire(TIME_MS)


class RunAlreadyEnqueued(Message):
    """The same mutation was replayed: the Run it queued then."""

    SCHEMA = ENQUEUE_SCHEMA
    CAP = 4 * KIB

    status: Literal["already_enqueued"] = wire(Enum(("already_enqueued",)), default="already_enqueued")
    run_id: str = wire(Uuid())
    task_revision_id: str = wire(Uuid())
    queued_at_ms: int = wire(TIME_MS)


EnqueueResponse = RunEnqueued | RunAlreadyEnqueued
ENQUEUE_RESPONSES: Final[Variants[EnqueueResponse]] = Variants(RunEnqueued, RunAlreadyEnqueued)

MESSAGES: Final[tuple[type[Message], ...]] = (EnqueueRequest, RunEnqueued, RunAlreadyEnqueued)
