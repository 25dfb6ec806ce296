"""qinglong/run-output@v1: a task's output, Worker → database → user. Touches nothing: declarations.

Append (the Worker, ≤ 352 KiB): the Attempt fence, the stream (stdout or stderr), the byte offset of the
chunk in that stream and ≤ 256 KiB of it as padded base64. The answer is ql_api.output_append_v1's
`appended` result: the stream's nextOffset (the bytes the database holds the end of; a replay of held
bytes answers it too, so a restarted Worker learns where to go on from its first call) and the caps the
database keeps per stream: the first `headBytes` and the last `tailBytes` at least. Once the head is
complete the Worker may skip ahead to the tail: the skipped bytes are dropped, and a reader sees the
offsets jump.

Lost (the Worker, ≤ 4 KiB): the Attempt fence, the stream and the bytes the task wrote to it (as the Worker counted
them, before masking), once the database refused the rest of an Attempt's output (its Lease ran out, the Attempt is
lost). The answer is ql_api.output_lost_v1's: `recorded` (a Run event output.lost) or `already_recorded`, with what
was written and the end of the stream the database holds (masked bytes).

Read (a user): the query names the Attempt (`attempt`, its number; absent: the latest) and where the
previous page ended (`after`, the last chunk's `seq`). The answer is ql_api.run_output_v1's `output`
result: the Run's status, the Attempt (null before the first one), each stream's totals, chunks in
arrival order (≤ 256 KiB of data), and `more` when chunks beyond this page exist.
"""

from __future__ import annotations

from typing import Final, Literal

from qinglong.wire.codec import KIB, MAX_SAFE_INTEGER
from qinglong.wire.common import (
    ATTEMPT_STATUSES,
    ERROR_CODE,
    RUN_STATUSES,
    TIME_MS,
    AttemptFence,
    AttemptStatus,
    RunStatus,
)
from qinglong.wire.fields import Base64Bytes, Bool, Enum, Int, List, Message, Nested, Record, Str, Uuid, wire
from qinglong.wire.query import Query

OUTPUT_SCHEMA: Final = "qinglong/run-output@v1"
CHUNK_MAX_BYTES: Final = 256 * KIB  # ql.output_chunks.data's check and output_append_v1's limit
PAGE_MAX_BYTES: Final = 256 * KIB  # run_output_v1's default page: the data of one answer
PAGE_MAX_CHUNKS: Final = 2048
Stream = Literal["stdout", "stderr"]
STREAMS: Final[tuple[Stream, ...]] = ("stdout", "stderr")
OFFSET: Final = Int(0, MAX_SAFE_INTEGER)


class OutputAppendRequest(AttemptFence):
    """Body of an append: the fence, the stream, the chunk's offset and its bytes."""

    SCHEMA = OUTPUT_SCHEMA
    CAP = 352 * KIB

    stream: Stream = wire(Enum(STREAMS))
    offset: int = wire(OFFSET)
    data: bytes = wire(Base64Bytes(CHUNK_MAX_BYTES), name="dataBase64", secret=True)


class OutputAppended(Message):
    """Where the stream ends in the database, and what it keeps of a long one."""

    SCHEMA = OUTPUT_SCHEMA
    CAP = 1 * KIB

    status: Literal["appended"] = wire(Enum(("appended",)), default="appended")
    stream: Stream = wire(Enum(STREAMS))
    next_offset: int = wire(OFFSET)
    head_bytes: int = wire(Int(0, MAX_SAFE_INTEGER))
    tail_bytes: int = wire(Int(1, MAX_SAFE_INTEGER))


class OutputLostRequest(AttemptFence):
    """Body of a report of lost output: the fence, the stream, the bytes the task wrote to it."""

    SCHEMA = OUTPUT_SCHEMA
    CAP = 4 * KIB

    stream: Stream = wire(Enum(STREAMS))
    written_bytes: int = wire(OFFSET)


class OutputLost(Message):
    """The lost output as the Run's history records it (once per Attempt and stream)."""

    SCHEMA = OUTPUT_SCHEMA
    CAP = 1 * KIB

    status: Literal["recorded", "already_recorded"] = wire(Enum(("recorded", "already_recorded")))
    stream: Stream = wire(Enum(STREAMS))
    written_bytes: int = wire(OFFSET)
    stored_bytes: int = wire(OFFSET)


class RunOutputQuery(Query):
    """Which Attempt, and after which chunk."""

    attempt: int | None = wire(Int(1, 100), optional=True, default=None)  # its number; absent: the latest
    after: int | None = wire(OFFSET, optional=True, default=None)  # the last seq read


class OutputAttempt(Record):
    """The Attempt whose output this is."""

    attempt_id: str = wire(Uuid())
    attempt_no: int = wire(Int(1, 100))
    status: AttemptStatus = wire(Enum(ATTEMPT_STATUSES))
    exit_code: int | None = wire(Int(0, 255), nullable=True)
    error_code: str | None = wire(ERROR_CODE, nullable=True)
    ended_at_ms: int | None = wire(TIME_MS, nullable=True)
    claimed_at_ms: int = wire(TIME_MS)  # a Worker's pull claimed it
    started_at_ms: int | None = wire(TIME_MS, nullable=True)  # the starting ACK (null: it never started)
    worker_name: str = wire(Str(200, min_len=1))  # the Worker holding it, by name only (never its id)


class OutputStream(Record):
    """A stream's totals: the bytes that reached the database, the bytes it keeps, the head cap."""

    stream: Stream = wire(Enum(STREAMS))
    next_offset: int = wire(OFFSET)
    head_bytes: int = wire(Int(0, MAX_SAFE_INTEGER))
    kept_bytes: int = wire(OFFSET)


class OutputChunk(Record):
    """Bytes of one stream at an offset; `seq` orders chunks of both streams by arrival."""

    seq: int = wire(Int(1, MAX_SAFE_INTEGER))
    stream: Stream = wire(Enum(STREAMS))
    offset: int = wire(OFFSET)
    data: bytes = wire(Base64Bytes(CHUNK_MAX_BYTES))


class RunOutput(Message):
    """One page of an Attempt's output."""

    SCHEMA = OUTPUT_SCHEMA
    CAP = 4 * PAGE_MAX_BYTES // 3 + 256 * KIB  # the data as base64, and the chunks' framing

    status: Literal["output"] = wire(Enum(("output",)), default="output")
    run_status: RunStatus = wire(Enum(RUN_STATUSES))
    attempt: OutputAttempt | None = wire(Nested(OutputAttempt), nullable=True)
    attempts: int = wire(Int(0, 100))
    streams: tuple[OutputStream, ...] = wire(List(Nested(OutputStream), max_items=2))
    chunks: tuple[OutputChunk, ...] = wire(List(Nested(OutputChunk), max_items=PAGE_MAX_CHUNKS))
    more: bool = wire(Bool())


MESSAGES: Final[tuple[type[Message], ...]] = (
    OutputAppendRequest,
    OutputAppended,
    OutputLostRequest,
    OutputLost,
    RunOutput,
)
