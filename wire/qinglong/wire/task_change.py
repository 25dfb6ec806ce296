"""qinglong/task@v1 and qinglong/schedule-preview@v1: tasks changed through the user API. Touches nothing: declarations.

A user makes a task's revision, enables or disables it and sets its schedule; a preview answers the next fire times
an expression would have.

Each change needs `task.write` (owner, admin), admitted before the body is read and re-verified by the database in
the transaction, as every user mutation is (docs/decisions/0024-console-actions.md). The task is named in the path
by its name (`{task}`, unique within the Project).

A revision (PUT …/tasks/{task}) carries the whole plan (the wire's `Plan`, as an operator's `task create` stores
it) and, optionally, an operator's signature of it that the client made (the CLI's `--sign`; the database stores
it, the Worker judges it, decision 0017). It answers `created` (202: a new task), `revised` (202: a new revision of
an existing one) or `already_made` (200: the same mutation replayed, its first answer). A status (PUT
…/tasks/{task}/status, `active` true or false) answers `enabled` or `disabled` with `changed`; a schedule (PUT
…/tasks/{task}/schedule: a 5- or 6-field cron expression, an IANA zone, the overlap policy; `cron` null clears it)
answers `set`, `unchanged` or `cleared`. Both set a state, so a repeat is harmless and needs no mutation id.

The preview (GET …/schedule-preview?cron=…&timezone=…&count=…, `run.read`) reads nothing of the Project: it
answers the next `count` fire times (1 to 20, 5 by default) from now, each in ms and as local ISO 8601 time with
its offset, or the refusal a schedule set would answer for the same expression and zone.
"""

from __future__ import annotations

from typing import Final, Literal

from qinglong.wire.cancellation import MUTATION_ID_PATTERN
from qinglong.wire.codec import KIB
from qinglong.wire.common import NAME_PATTERN, TIME_MS
from qinglong.wire.fields import Bool, Enum, Int, List, Message, Nested, Record, Str, Uuid, Variants, wire
from qinglong.wire.offer import Plan, PlanSignature
from qinglong.wire.query import Query

TASK_SCHEMA: Final = "qinglong/task@v1"
SCHEDULE_PREVIEW_SCHEMA: Final = "qinglong/schedule-preview@v1"
PREVIEW_MAX: Final = 20
NAME: Final = Str(128, min_len=1, pattern=NAME_PATTERN)
CRON: Final = Str(200, min_len=1)
TIMEZONE: Final = Str(64, min_len=1)
OVERLAPS: Final = ("skip", "allow")


class TaskRevisionRequest(Message):
    """Body of a revision (PUT …/tasks/{task}): the whole plan, its signature if the client signed it, and the
    caller's mutation id."""

    SCHEMA = TASK_SCHEMA
    CAP = 256 * KIB

    mutation_id: str = wire(Str(128, min_len=1, pattern=MUTATION_ID_PATTERN))
    plan: Plan = wire(Nested(Plan))
    plan_signature: PlanSignature | None = wire(Nested(PlanSignature), optional=True, default=None)


class _RevisionAnswer(Message):
    """What a revision answers; its status says how the revision came about."""

    SCHEMA = TASK_SCHEMA
    CAP = 4 * KIB

    status: str = wire(Enum(("created", "revised", "already_made")))
    task_id: str = wire(Uuid())
    revision_id: str = wire(Uuid())
    name: str = wire(NAME)
    signed: bool = wire(Bool())


class TaskCreated(_RevisionAnswer):
    """This call created the task, its first revision current."""

    status: Literal["created"] = wire(Enum(("created",)), default="created")


class TaskRevised(_RevisionAnswer):
    """This call gave the task a new revision, now current (Runs already queued keep theirs)."""

    status: Literal["revised"] = wire(Enum(("revised",)), default="revised")


class TaskRevisionReplayed(_RevisionAnswer):
    """The same mutation was replayed: the revision it made then."""

    status: Literal["already_made"] = wire(Enum(("already_made",)), default="already_made")


class TaskStatusRequest(Message):
    """Body of a status change (PUT …/tasks/{task}/status): enabled (true) or disabled (false)."""

    SCHEMA = TASK_SCHEMA
    CAP = 1 * KIB

    active: bool = wire(Bool())


class _StatusAnswer(Message):
    """What a status change answers (changed: this call changed it)."""

    SCHEMA = TASK_SCHEMA
    CAP = 4 * KIB

    status: str = wire(Enum(("enabled", "disabled")))
    project_id: str = wire(Uuid())
    task_id: str = wire(Uuid())
    name: str = wire(NAME)
    changed: bool = wire(Bool())


class TaskEnabled(_StatusAnswer):
    """The task is enabled (changed: this call enabled it)."""

    status: Literal["enabled"] = wire(Enum(("enabled",)), default="enabled")


class TaskDisabled(_StatusAnswer):
    """The task is disabled: neither users nor its schedule queue its Runs (changed: this call disabled it)."""

    status: Literal["disabled"] = wire(Enum(("disabled",)), default="disabled")


class TaskScheduleRequest(Message):
    """Body of a schedule change (PUT …/tasks/{task}/schedule): `cron` null clears the schedule (then the other
    fields are not read); otherwise the zone is required and the overlap policy is skip unless given."""

    SCHEMA = TASK_SCHEMA
    CAP = 1 * KIB

    cron: str | None = wire(CRON, nullable=True)
    timezone: str | None = wire(TIMEZONE, optional=True, default=None)
    overlap: Literal["skip", "allow"] = wire(Enum(OVERLAPS), optional=True, default="skip")


class TaskScheduleSet(Message):
    """This call set or changed the schedule: its next fire time counts from now (an overlap change keeps it)."""

    SCHEMA = TASK_SCHEMA
    CAP = 4 * KIB

    status: Literal["set"] = wire(Enum(("set",)), default="set")
    task_id: str = wire(Uuid())
    cron: str = wire(CRON)
    timezone: str = wire(TIMEZONE)
    overlap: Literal["skip", "allow"] = wire(Enum(OVERLAPS))
    next_fire_at_ms: int = wire(TIME_MS)


class TaskScheduleUnchanged(Message):
    """The schedule already was this one (or, for a clear, there was none): nothing changed."""

    SCHEMA = TASK_SCHEMA
    CAP = 4 * KIB

    status: Literal["unchanged"] = wire(Enum(("unchanged",)), default="unchanged")
    task_id: str = wire(Uuid())
    cron: str | None = wire(CRON, optional=True, default=None)
    timezone: str | None = wire(TIMEZONE, optional=True, default=None)
    overlap: Literal["skip", "allow"] | None = wire(Enum(OVERLAPS), optional=True, default=None)
    next_fire_at_ms: int | None = wire(TIME_MS, optional=True, default=None)


class TaskScheduleCleared(Message):
    """This call cleared the schedule (a fire time it left due was handled first)."""

    SCHEMA = TASK_SCHEMA
    CAP = 4 * KIB

    status: Literal["cleared"] = wire(Enum(("cleared",)), default="cleared")
    task_id: str = wire(Uuid())


class SchedulePreviewQuery(Query):
    """The expression, its zone, and how many fire times (absent: 5)."""

    cron: str | None = wire(CRON, optional=True, default=None)
    timezone: str | None = wire(TIMEZONE, optional=True, default=None)
    count: int | None = wire(Int(1, PREVIEW_MAX), optional=True, default=None)


class FireTime(Record):
    """One fire time: its instant and the local time with its UTC offset in the schedule's zone."""

    at_ms: int = wire(TIME_MS)
    local: str = wire(Str(32, min_len=19))


class SchedulePreview(Message):
    """The next fire times of the expression, soonest first."""

    SCHEMA = SCHEDULE_PREVIEW_SCHEMA
    CAP = 8 * KIB

    status: Literal["previewed"] = wire(Enum(("previewed",)), default="previewed")
    cron: str = wire(CRON)
    timezone: str = wire(TIMEZONE)
    fires: tuple[FireTime, ...] = wire(List(Nested(FireTime), max_items=PREVIEW_MAX))


TaskRevisionResponse = TaskCreated | TaskRevised | TaskRevisionReplayed
TASK_REVISION_RESPONSES: Final[Variants[TaskRevisionResponse]] = Variants(TaskCreated, TaskRevised,
                                                                           TaskRevisionReplayed)  # fmt: skip
TaskStatusResponse = TaskEnabled | TaskDisabled
TASK_STATUS_RESPONSES: Final[Variants[TaskStatusResponse]] = Variants(TaskEnabled, TaskDisabled)
TaskScheduleResponse = TaskScheduleSet | TaskScheduleUnchanged | TaskScheduleCleared
TASK_SCHEDULE_RESPONSES: Final[Variants[TaskScheduleResponse]] = Variants(
    TaskScheduleSet, TaskScheduleUnchanged, TaskScheduleCleared
)

MESSAGES: Final[tuple[type[Message], ...]] = (
    TaskRevisionRequest,
    TaskCreated,
    TaskRevised,
    TaskRevisionReplayed,
    TaskStatusRequest,
    TaskEnabled,
    TaskDisabled,
    TaskScheduleRequest,
    TaskScheduleSet,
    TaskScheduleUnchanged,
    TaskScheduleCleared,
    SchedulePreview,
)
