"""The output spool (worker/qinglong/worker/spool.py): the runner's Writer keeps a stream's head and at most two tail
segments on disk, the reader finds every byte still held by the files' names alone and says where bytes were
dropped; a write that fails drops its bytes and the next ones go on at their own offset. Touches tmp_path only.
"""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from qinglong.worker import spool
from tests.unit.wire.kit import FEW


@pytest.fixture(autouse=True)
def bounded() -> Iterator[None]:
    """A write that loops for ever fails its test instead of holding the suite: SIGALRM after 20 s."""

    def hung(signum: int, frame: object) -> None:
        raise TimeoutError("a spool call did not return")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def on_disk(path: Path) -> int:
    return sum(f.stat().st_size for f in path.parent.iterdir() if f.name.startswith(path.name))


def test_a_stream_keeps_its_head_and_its_last_segments(tmp_path: Path) -> None:
    path = tmp_path / "n.log"
    writer = spool.Writer(str(path), 100, 50)
    data = bytes(range(256)) * 40  # 10,240 bytes
    for i in range(0, len(data), 7):
        writer.write(data[i : i + 7])
        assert on_disk(path) <= 100 + 2 * 50
    writer.close()
    assert writer.written == spool.size(str(path)) == len(data)
    assert sorted(f.name for f in tmp_path.iterdir()) == ["n.log", "n.log.10150", "n.log.10200"]
    assert spool.read(str(path), 0, 1000) == (0, data[:100])  # one file per read
    assert spool.read(str(path), 100, 1000) == (10150, data[10150:10200])  # the bytes between were dropped
    assert spool.read(str(path), 10160, 1000) == (10160, data[10160:10200])
    assert spool.read(str(path), 10200, 5) == (10200, data[10200:10205])
    assert spool.read(str(path), len(data), 5) == (len(data), b"")
    assert spool.remove(str(path)) == 3 and list(tmp_path.iterdir()) == []
    assert spool.size(str(path)) == 0 and spool.read(str(path), 0, 9) == (0, b"")


@FEW
@example(head=0, segment=1, pieces=[b"ab", b"c"])
@given(
    head=st.integers(0, 40),
    segment=st.integers(1, 40),
    pieces=st.lists(st.binary(min_size=1, max_size=60), max_size=30),
)
def test_whatever_the_pieces_the_reader_gets_the_head_and_at_least_a_segment_of_tail(
    tmp_path_factory: pytest.TempPathFactory, head: int, segment: int, pieces: list[bytes]
) -> None:
    path = tmp_path_factory.mktemp("spool") / "n.err"
    writer = spool.Writer(str(path), head, segment)
    for piece in pieces:
        writer.write(piece)
    writer.close()
    data = b"".join(pieces)
    held, offset = {}, 0
    while (got := spool.read(str(path), offset, 7))[1]:
        held[got[0]] = got[1]
        offset = got[0] + len(got[1])
    kept = b"".join(held.values())
    assert spool.size(str(path)) == len(data) and on_disk(path) == len(kept) <= head + 2 * segment
    assert all(data[at : at + len(chunk)] == chunk for at, chunk in held.items())
    assert kept.startswith(data[:head]) and kept.endswith(data[-min(len(data), segment) :] if data else b"")


def test_a_head_of_nothing_puts_every_byte_in_segments(tmp_path: Path) -> None:
    """worker.toml `output_head_kib = 0`: PATH stays empty, the segments start at 0 (a segment at offset 0 is a
    segment, not the head: it once took no byte and the write looped for ever)."""
    path = tmp_path / "n.log"
    writer = spool.Writer(str(path), 0, 10)
    writer.write(b"0123456789abcdefghijklmno")
    writer.close()
    assert sorted(f.name for f in tmp_path.iterdir()) == ["n.log", "n.log.10", "n.log.20"]
    assert spool.size(str(path)) == 25 and (path).read_bytes() == b""
    assert spool.read(str(path), 0, 99) == (10, b"abcdefghij")


def test_without_a_cap_everything_goes_to_one_file(tmp_path: Path) -> None:
    path = tmp_path / "n.log"
    writer = spool.Writer(str(path), None, None)
    writer.write(b"x" * 100_000)
    writer.close()
    assert os.listdir(tmp_path) == ["n.log"] and spool.read(str(path), 99_990, 99) == (99_990, b"x" * 10)


def test_bytes_a_full_disk_refused_are_a_hole_where_they_were(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "n.log"
    writer = spool.Writer(str(path), 100, 50)
    writer.write(b"a" * 30)
    real_write = os.write

    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    writer.write(b"b" * 20)  # dropped
    monkeypatch.setattr(os, "write", real_write)
    writer.write(b"c" * 10)
    writer.close()
    assert spool.size(str(path)) == writer.written == 60
    assert spool.read(str(path), 0, 99) == (0, b"a" * 30)
    assert spool.read(str(path), 30, 99) == (50, b"c" * 10)


def test_a_file_named_like_a_segment_but_not_one_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "n.log"
    writer = spool.Writer(str(path), 10, 10)
    writer.write(b"0123456789")
    writer.close()
    for name in ("n.log.x1", "n.log.²", "n.logs.5", "n.log.5.tmp"):
        (tmp_path / name).write_bytes(b"nope")
    assert spool.size(str(path)) == 10 and spool.read(str(path), 0, 99) == (0, b"0123456789")
    assert spool.read(str(path), 10, 99) == (10, b"")


def test_a_bad_cap_is_refused(tmp_path: Path) -> None:
    for head, segment in ((10, None), (None, 10), (10, 0), (-1, 10)):
        with pytest.raises(ValueError):
            spool.Writer(str(tmp_path / "n.log"), head, segment)
    assert list(tmp_path.iterdir()) == []
