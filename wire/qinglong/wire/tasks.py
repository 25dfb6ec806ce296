"""qinglong/task-list@v1: a Project's tasks, for the user API and its clients. Touches nothing: declarations.

No body, no query. The answer is ql_api.task_list_v1's `listed` result for the admitted Project: its id
and name, and every task by name with its status, its current revision's plan summary (argv, pool,
timeoutMs, maxAttempts), the plan in full (what a client starts a new revision from: qinglong.wire.task_change), whether
the revision is signed, and its schedule. A client resolves a task's name to its id here (names are
unique within a Project).
"""

from __future__ import annotations

from typing import Final, Literal

from qinglong.wire.codec import KIB
from qinglong.wire.common import MAX_INT32, NAME_PATTERN, TIME_MS
from qinglong.wire.fields import Bool, Enum, Int, List, Message, Nested, Record, Str, Uuid, wire
from qinglong.wire.offer import ARG_MAX_CHARS, ARGV_MAX_ITEMS, POOL_PATTERN, Plan

TASK_LIST_SCHEMA: Final = "qinglong/task-list@v1"
TASKS_MAX: Final = 1000
NAME: Final = Str(128, min_len=1, pattern=NAME_PATTERN)


class TaskSchedule(Record):
    """A task's schedule: a 5- or 6-field (second first) cron expression in an IANA time zone, its overlap policy,
    its next three fires."""

    cron: str = wire(Str(200, min_len=9))
    timezone: str = wire(Str(64, min_len=1))
    overlap: Literal["skip", "allow"] = wire(Enum(("skip", "allow")))
    next_fires_ms: tuple[int, ...] = wire(List(TIME_MS, max_items=3))  # the next fire times, soonest first


class TaskSummary(Record):
    """One task and its current revision's plan, in short."""

    task_id: str = wire(Uuid())
    name: str = wire(NAME)
    status: Literal["active", "disabled"] = wire(Enum(("active", "disabled")))
    revision_id: str | None = wire(Uuid(), nullable=True)
    argv: tuple[str, ...] | None = wire(List(Str(ARG_MAX_CHARS), max_items=ARGV_MAX_ITEMS), nullable=True)
    pool: str = wire(Str(64, min_len=1, pattern=POOL_PATTERN))
    timeout_ms: int | None = wire(Int(1, MAX_INT32), nullable=True)
    max_attempts: int | None = wire(Int(1, 100), nullable=True)
    schedule: TaskSchedule | None = wire(Nested(TaskSchedule), nullable=True)
    plan: Plan | None = wire(Nested(Plan), nullable=True)  # the current plan in full
    signed: bool = wire(Bool(), optional=True, default=False)  # the current revision carries a plan signature


class TaskList(Message):
    """Every task of the Project, by name."""

    SCHEMA = TASK_LIST_SCHEMA
    CAP = 2048 * KIB

    status: Literal["listed"] = wire(Enum(("listed",)), default="listed")
    project_id: str = wire(Uuid())
    project: str = wire(NAME)
    tasks: tuple[TaskSummary, ...] = wire(List(Nested(TaskSummary), max_items=TASKS_MAX))


MESSAGES: Final[tuple[type[Message], ...]] = (TaskList,)
