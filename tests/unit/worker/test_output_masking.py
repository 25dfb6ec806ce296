"""Masked output offsets (worker/qinglong/worker/coordinator.py `Cursor`): a stream leaves the Worker masked and
the database counts masked bytes. Against a model of the database's append rules (tests/unit/worker/stub_plane.py
`Stream`): whatever the reads, chunks and ticks, what the database holds is exactly the one-shot masking of the
raw file (`mask_all`), a value never reaches it, not even split across two reads or two uploads; the held tail
waits for the end of the task; a restarted Worker rebuilds its position by masking the file again from 0 up to
the database's nextOffset and goes on without a gap or a duplicate; the head and tail caps apply to the masked
stream; a plan with no secret reads only what it sends.
Touches nothing.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qinglong.wire import OutputAppended
from qinglong.worker import coordinator
from qinglong.worker.coordinator import Cursor
from qinglong.worker.masking import MASK, Masker, mask_all, patterns
from tests.unit.wire.kit import FEW
from tests.unit.worker.stub_plane import Stream

SECRET = b"hunter2-SECRET"
VALUES = (SECRET,)


class File:
    """A growing output spool (worker/spool.py `read`); counts the bytes read from it. `dropped`: the ranges its
    cap removed, in order."""

    def __init__(self, data: bytes = b"") -> None:
        self.data = data
        self.read_bytes = 0
        self.dropped: list[tuple[int, int]] = []

    def read(self, offset: int, n: int) -> tuple[int, bytes]:
        for start, end in self.dropped:
            if start <= offset < end:
                offset = end
        chunk = self.data[offset : min([offset + n, *(start for start, _ in self.dropped if start > offset)])]
        self.read_bytes += len(chunk)
        return offset, chunk


def step(cursor: Cursor, db: Stream, file: File, *, final: bool = False, limit: int = 16) -> tuple[bool, bytes | None]:
    """One append call as the coordinator makes it: (moved on, the chunk sent or None)."""
    masked = cursor.advance(len(file.data), final, file.read, limit)
    planned = cursor.plan(len(file.data), file.read, limit)
    if planned is None or not planned[1]:
        return masked, None
    offset, data = planned
    before = cursor.shipped
    db.append(offset, data)
    cursor.answered(OutputAppended(stream="stdout", next_offset=db.next_offset, head_bytes=db.head, tail_bytes=db.tail))
    return masked or before is None or db.next_offset > before.next_offset, data


def drain(cursor: Cursor, db: Stream, file: File, limit: int = 16) -> list[bytes]:
    sent = []
    while True:
        moved, data = step(cursor, db, file, final=True, limit=limit)
        if data is not None:
            sent.append(data)
        if not moved:
            return sent


@pytest.fixture(autouse=True)
def small_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(coordinator, "_READ_STEP", 5)  # a value is always split across reads


def test_a_value_split_across_reads_and_uploads_never_reaches_the_database() -> None:
    raw = b"start " + SECRET + b" middle " + SECRET + SECRET + b" end " + SECRET
    file, db, cursor = File(), Stream(head=1 << 20, tail=1 << 20), Cursor(VALUES)
    sent: list[bytes] = []
    for size in range(0, len(raw) + 1, 3):  # the task writes 3 bytes between ticks
        file.data = raw[:size]
        _, data = step(cursor, db, file, limit=7)
        sent += [data] if data is not None else []
    file.data = raw
    sent += drain(cursor, db, file, limit=7)
    assert db.whole() == mask_all(patterns(VALUES), raw) == b"start *** middle ****** end ***"
    assert all(len(chunk) <= 7 for chunk in sent)
    assert SECRET not in b"".join(sent), "a value reached the database"


def test_the_tail_that_could_still_become_a_value_waits_for_the_end_of_the_task() -> None:
    file, db, cursor = File(b"output then " + SECRET[:-1]), Stream(head=1 << 20, tail=1 << 20), Cursor(VALUES)
    while step(cursor, db, file)[0]:
        pass
    held = max(map(len, patterns(VALUES))) - 1  # the longest pattern (base64, 20 bytes) less one byte
    assert db.whole() == file.data[:-held] == b"output", "the tail that could still become a value was sent"
    file.data += SECRET[-1:] + b" and more"
    drain(cursor, db, file)
    assert db.whole() == b"output then *** and more"
    # a task that ended on a prefix: flushed as it is (a prefix is not the value)
    file, db, cursor = File(b"ends on " + SECRET[:-1]), Stream(head=1 << 20, tail=1 << 20), Cursor(VALUES)
    drain(cursor, db, file)
    assert db.whole() == b"ends on " + SECRET[:-1]


def test_a_restarted_worker_rebuilds_its_position_by_masking_again_from_zero() -> None:
    raw = b"".join(b"line %04d %s\n" % (i, SECRET if i % 3 == 0 else b"plain") for i in range(200))
    file, db = File(raw[:1500]), Stream(head=1 << 20, tail=1 << 20)
    first = Cursor(VALUES)
    for _ in range(20):  # the first Worker ships part of it, then is killed
        step(first, db, file, limit=64)
    held = db.next_offset
    assert 0 < held < len(mask_all(patterns(VALUES), raw[:1500]))

    file.data = raw
    again = Cursor(VALUES)  # knows nothing: masks from 0, sends from 0, the database answers where it is
    sent = drain(again, db, file, limit=64)
    assert sent[0] == mask_all(patterns(VALUES), raw)[:64], "the first append replays from masked offset 0"
    assert db.whole() == mask_all(patterns(VALUES), raw), "a gap or a duplicate"
    assert SECRET not in db.whole()


def test_head_and_tail_caps_count_masked_bytes() -> None:
    raw = b"".join(b"%05d %s\n" % (i, SECRET) for i in range(2000))  # 36 KB raw, 24 KB masked
    masked = mask_all(patterns(VALUES), raw)
    assert len(masked) < len(raw)
    head, tail, limit = 1000, 700, 256
    file, db, cursor = File(raw), Stream(head=head, tail=tail), Cursor(VALUES)
    sent = drain(cursor, db, file, limit=limit)
    assert db.next_offset == len(masked), "nextOffset is in the units of what was shipped"
    stored = b"".join(db.kept[o] for o in sorted(db.kept))
    assert stored.startswith(masked[:head]) and stored.endswith(masked[-tail:])
    for offset, data in db.kept.items():
        assert masked[offset : offset + len(data)] == data
    assert sum(map(len, sent)) <= head + tail + limit, "more than the head and the tail on the wire"
    assert len(cursor.pending) <= tail + limit, "the skipped bytes were kept in memory"


def test_a_restart_past_the_head_skips_to_the_tail_of_the_masked_stream() -> None:
    raw = b"".join(b"%05d %s\n" % (i, SECRET) for i in range(2000))
    masked = mask_all(patterns(VALUES), raw)
    file, db = File(raw[:20_000]), Stream(head=1000, tail=700)
    first = Cursor(VALUES)
    while step(first, db, file, limit=256)[0]:  # the first Worker holds the head and a tail of 20 KB raw, killed
        pass
    assert db.next_offset > 1000
    file.data = raw
    drain(Cursor(VALUES), db, file, limit=256)
    assert db.next_offset == len(masked)
    for offset, data in db.kept.items():
        assert masked[offset : offset + len(data)] == data, offset
    held = set().union(*(range(o, o + len(d)) for o, d in db.kept.items()))
    assert set(range(1000)) | set(range(len(masked) - 700, len(masked))) <= held, "a gap in the head or the tail"


def test_catching_up_is_bounded_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(coordinator, "MASK_READ_BYTES", 100)
    raw = b"x" * 950 + SECRET
    file, db = File(raw), Stream(head=0, tail=1 << 20)
    db.next_offset = 900  # the database holds 900 masked bytes from before a restart
    cursor = Cursor(VALUES)
    calls = []
    while True:
        before = file.read_bytes
        moved, data = step(cursor, db, file, final=True, limit=64)
        calls.append((file.read_bytes - before, data))
        if not moved:
            break
    assert all(read <= 100 for read, _ in calls)
    assert calls[0][1] == b"x" * 64, "a new cursor sends from 0 first: the database answers where it is"
    assert [d for _, d in calls[1:9]] == [None] * 8, "nothing to send while the masked stream is behind the database"
    assert b"".join(d for _, d in calls[1:] if d) == b"x" * 50 + MASK


def test_without_a_value_to_mask_only_what_is_sent_is_read() -> None:
    raw = bytes(range(256)) * 400  # 100 KiB
    for values in ((), (b"abc",)):  # none, or too short to be masked
        file, db, cursor = File(raw), Stream(head=1000, tail=500), Cursor(values)
        sent = drain(cursor, db, file, limit=256)
        assert cursor.masker is None
        assert file.read_bytes == sum(map(len, sent)) <= 1000 + 500 + 256
        assert db.next_offset == len(raw)


@FEW
@given(
    pieces=st.lists(st.sampled_from([SECRET, b"a", b"hunter", b"2-SEC", b"\n", b"RET", b"hunter2-SECRE"]), max_size=40),
    read_step=st.integers(1, 9),
    limit=st.integers(1, 20),
    tick=st.integers(1, 30),
    restart_at=st.integers(0, 10),
)
def test_any_cut_gives_the_one_shot_masking(
    pieces: list[bytes], read_step: int, limit: int, tick: int, restart_at: int
) -> None:
    raw = b"".join(pieces)
    file, db = File(), Stream(head=1 << 20, tail=1 << 20)
    cursor = Cursor(VALUES)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(coordinator, "_READ_STEP", read_step)
        for n, size in enumerate(range(0, len(raw) + tick, tick)):
            file.data = raw[:size]
            if n == restart_at:
                cursor = Cursor(VALUES)  # a restarted Worker
            step(cursor, db, file, limit=limit)
        file.data = raw
        drain(cursor, db, file, limit=limit)
    assert db.whole() == mask_all(patterns(VALUES), raw)
    assert SECRET not in db.whole()


def test_what_a_straggler_writes_after_the_drain_is_never_shipped_nor_completes_a_value() -> None:
    file, db, cursor = File(b"last words " + SECRET[:8]), Stream(head=1 << 20, tail=1 << 20), Cursor(VALUES)
    drain(cursor, db, file)  # the task ended on part of a value: flushed as it is
    file.data += SECRET[8:] + b" from a straggler"
    assert drain(cursor, db, file) == [], "bytes after the flush were shipped"
    drain(Cursor(VALUES), db, file)  # a restarted Worker drains again: the whole file masks the value
    assert db.whole().startswith(b"last words " + SECRET[:8]) and SECRET not in db.whole()


FILLER = st.sampled_from([b"x", b"yz", b"\n", b"  ", b"013456789"])  # no byte of SECRET


@FEW
@given(
    pieces=st.lists(st.one_of(st.just(SECRET), FILLER), max_size=60),
    cuts=st.lists(st.tuples(st.integers(0, 30), st.integers(16, 300), st.integers(1, 60)), max_size=4),
    read_step=st.integers(1, 20),
    limit=st.integers(1, 20),
    tick=st.integers(1, 30),
    restart_at=st.integers(0, 30),
    masked=st.booleans(),
)
def test_bytes_the_spool_dropped_never_let_part_of_a_value_through(
    pieces: list[bytes],
    cuts: list[tuple[int, int, int]],
    read_step: int,
    limit: int,
    tick: int,
    restart_at: int,
    masked: bool,
) -> None:
    """The spool drops ranges after its head while the Worker lags (at tick `when`, bytes [start, start + length)
    once written), the Worker may restart: no byte of a value leaves, not even the part of an occurrence the cut
    split, what the database holds only grows, and a stream without a cut is the one-shot masking."""
    raw = b"".join(pieces)
    file, db = File(), Stream(head=16, tail=1 << 20)
    cursor = Cursor(VALUES if masked else ())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(coordinator, "_READ_STEP", read_step)
        for n, size in enumerate(range(0, len(raw) + tick, tick)):
            file.data = raw[:size]
            for when, start, length in cuts:
                if n == when and start + length <= size and all(start >= end for _, end in file.dropped):
                    file.dropped.append((start, start + length))
            if n == restart_at:
                cursor = Cursor(VALUES if masked else ())  # a restarted Worker
            step(cursor, db, file, limit=limit)
        file.data = raw
        drain(cursor, db, file, limit=limit)
    held = b"".join(db.kept[offset] for offset in sorted(db.kept))
    if masked:
        assert not set(held) & set(SECRET), held
    offsets = sorted(db.kept)
    assert all(a + len(db.kept[a]) <= b for a, b in itertools.pairwise(offsets)), "chunks overlap"
    if not file.dropped:
        assert held == (mask_all(patterns(VALUES), raw) if masked else raw)


@pytest.mark.parametrize("split", [1, 7, len(SECRET) - 1])
def test_a_cut_through_a_value_sends_neither_of_its_parts(split: int) -> None:
    """The Worker read up to inside an occurrence (its start held back as a possible value), then the spool
    dropped bytes from there: the held bytes are masked whole. Or the spool dropped an occurrence's start: the
    longest pattern's length less one after the cut is masked whole (joined to the MASK before it), the rest as
    usual."""
    hidden = Masker(VALUES).longest - 1  # held back before a cut, masked whole after one
    head, after = b"x" * 64, b" and then more text, longer than the longest form of the value\n"
    file, db, cursor = File(head + SECRET[:split]), Stream(head=16, tail=1 << 20), Cursor(VALUES)
    step(cursor, db, file, limit=1 << 10)
    file.data += SECRET[split:] + after
    file.dropped.append((64 + split, 64 + len(SECRET)))  # the cap dropped the occurrence's rest
    drain(cursor, db, file)
    assert db.whole() == head[: 64 + split - hidden] + MASK + after[hidden:]

    file, db, cursor = File(head), Stream(head=16, tail=1 << 20), Cursor(VALUES)
    step(cursor, db, file, limit=1 << 10)
    file.data += b"y" + SECRET + b"z" * 60 + SECRET + b" end\n"
    file.dropped.append((64, 65 + split))  # the cap dropped the occurrence's start
    drain(cursor, db, file)
    rest = b"z" * (60 - (hidden - (len(SECRET) - split)))
    assert db.whole() == head[: 64 - hidden] + MASK + rest + MASK + b" end\n"
