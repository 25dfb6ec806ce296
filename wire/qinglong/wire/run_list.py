"""qinglong/run-list@v1: a Project's run history, for the CLI and the user API. Touches nothing: declarations.

No body; the filters are query parameters (RunListQuery), refused like body fields (unknown, repeated or
malformed parameters). The answer is ql_api.run_list_v1's `listed` result: the Project's Runs newest
first by creation time (ties by id), at most `limit` (1..100, default 50) of them, each with its task,
status, attempt count, times, the last Attempt's exit code and the cancel reason. `nextCursor` is null
on the last page; otherwise pass it back as `cursor` for the next one. Pages are keyset pages over an
immutable key, so Runs created meanwhile never shift them: nothing is skipped or listed twice. A cursor
is opaque (a cursor the database did not make is `invalid.cursor`), and `sinceMs` must be before
`untilMs` (`invalid.time_range`).
"""

from __future__ import annotations

from typing import Final, Literal

from qinglong.wire.codec import KIB
from qinglong.wire.common import CANCEL_REASONS, NAME_PATTERN, RUN_STATUSES, TIME_MS, CancelReason, RunStatus
from qinglong.wire.fields import Enum, Int, List, Message, Nested, Record, Str, Uuid, wire
from qinglong.wire.query import Query

RUN_LIST_SCHEMA: Final = "qinglong/run-list@v1"
PAGE_MAX: Final = 100  # ql_api.run_list_v1's hard cap on a page
CURSOR_PATTERN: Final = "[A-Za-z0-9_-]{32}"  # base64url of (created_at_ms, id): 24 bytes
CURSOR: Final = Str(32, min_len=32, pattern=CURSOR_PATTERN)


class RunListQuery(Query):
    """The filters of a listing, as query parameters; each may be absent."""

    task_id: str | None = wire(Uuid(), optional=True, default=None)
    status: RunStatus | None = wire(Enum(RUN_STATUSES), optional=True, default=None)
    since_ms: int | None = wire(TIME_MS, optional=True, default=None)  # created at or after
    until_ms: int | None = wire(TIME_MS, optional=True, default=None)  # created before
    limit: int | None = wire(Int(1, PAGE_MAX), optional=True, default=None)  # absent: 50
    cursor: str | None = wire(CURSOR, optional=True, default=None)  # the previous page's nextCursor


class RunSummary(Record):
    """One Run of the history."""

    run_id: str = wire(Uuid())
    task_id: str = wire(Uuid())
    task_name: str = wire(Str(128, min_len=1, pattern=NAME_PATTERN))
    status: RunStatus = wire(Enum(RUN_STATUSES))
    attempt_count: int = wire(Int(0, 100))
    created_at_ms: int = wire(TIME_MS)
    started_at_ms: int | None = wire(TIME_MS, nullable=True)  # the first Attempt's starting ACK
    ended_at_ms: int | None = wire(TIME_MS, nullable=True)
    exit_code: int | None = wire(Int(0, 255), nullable=True)  # the last Attempt's
    cancel_reason: CancelReason | None = wire(Enum(CANCEL_REASONS), nullable=True)


class RunList(Message):
    """One page of a Project's Runs, newest first, and the cursor of the next page (null: the last)."""

    SCHEMA = RUN_LIST_SCHEMA
    CAP = 64 * KIB

    status: Literal["listed"] = wire(Enum(("listed",)), default="listed")
    runs: tuple[RunSummary, ...] = wire(List(Nested(RunSummary), max_items=PAGE_MAX))
    next_cursor: str | None = wire(CURSOR, nullable=True)


MESSAGES: Final[tuple[type[Message], ...]] = (RunList,)
