"""A task's output stream on disk (its spool): how the runner writes stdout or stderr and how the Worker reads
them back, with a cap per stream so a task that prints without end never fills the disk. Touches only a spool's
own files. Standard library only; nothing happens at import.

Format, for a stream whose spool is named PATH (`<nonce>.log` for stdout, `<nonce>.err` for stderr): PATH holds
the stream's first bytes, [0, its size); each `PATH.<start>` (`start` in decimal) holds the bytes [start, start +
its size). A file's name says where its bytes belong, so a reader needs no setting: the stream's size is the end
of its last file, and a byte no file holds was dropped. A plain file (no `PATH.<start>`) is a spool without a cap.

`Writer` (the runner's) appends the first `head` bytes to PATH and the rest to segments of `segment` bytes, each
a new `PATH.<start>`; when it starts a segment it unlinks every segment but the one before. So a stream takes at
most head + 2 x segment bytes on disk and keeps at least its last `segment` bytes (all of them, while fewer were
written). Bytes that cannot be written (a full disk) are dropped and counted: the next ones start a new segment at
their own offset, so a reader sees the hole where it is. The database keeps a stream's head and tail by the same
rule (ql.settings output_head_bytes and output_tail_bytes): with a head and a segment at least those, the spool
holds every byte the database will store, as long as the Worker reads faster than the task writes.

`size`, `read` and `remove` are the reader's (the Executor's and the retention's).
"""

from __future__ import annotations

import contextlib
import os
from typing import Final

HEAD_BYTES: Final = 512 * 1024  # a Worker's default head and segment: the database's default head and tail
TAIL_BYTES: Final = 512 * 1024
_WRITE: Final = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW
_READ: Final = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW


def _segments(path: str) -> list[tuple[int, str]]:
    """(start, file name) of PATH's segments, by start."""
    folder, name = os.path.split(path)
    prefix = name + "."
    try:
        names = os.listdir(folder or ".")
    except FileNotFoundError:
        return []
    starts = (n[len(prefix) :] for n in names if n.startswith(prefix))
    return sorted((int(s), f"{path}.{s}") for s in starts if s.isascii() and s.isdigit())


def _files(path: str) -> list[tuple[int, str]]:
    return [(0, path), *_segments(path)]


def size(path: str) -> int:
    """The bytes written to the stream so far (0 before PATH exists): the end of its last file."""
    end = 0
    for start, name in _files(path):
        with contextlib.suppress(FileNotFoundError):
            end = max(end, start + os.stat(name).st_size)
    return end


def read(path: str, offset: int, n: int) -> tuple[int, bytes]:
    """Up to `n` bytes of the stream from the first byte held at or after `offset`: (where they start, the bytes).
    A start above `offset` means the bytes between were dropped; no bytes, that nothing is held from `offset` on."""
    if type(offset) is not int or type(n) is not int or offset < 0 or n < 0:
        raise ValueError("offset and n must be non-negative ints")
    for start, name in _files(path):
        try:
            fd = os.open(name, _READ)
        except FileNotFoundError:
            continue  # unlinked since it was listed: its bytes are dropped
        try:
            end = start + os.fstat(fd).st_size
            if end <= offset or n == 0:
                continue
            at = max(offset, start)
            chunks: list[bytes] = []
            pos, want = at - start, n
            while want > 0 and (chunk := os.pread(fd, want, pos)):
                chunks.append(chunk)
                pos, want = pos + len(chunk), want - len(chunk)
            if chunks:
                return at, b"".join(chunks)
        finally:
            os.close(fd)
    return offset, b""


def remove(path: str) -> int:
    """Unlink PATH and its segments; how many files were removed (gone already: not counted). Never raises."""
    removed = 0
    for _, name in _files(path):
        with contextlib.suppress(OSError):
            os.unlink(name)
            removed += 1
    return removed


class Writer:
    """Appends one stream to its spool (the runner's): `head` bytes to PATH, the rest in segments of `segment`
    bytes (both None: everything to PATH, no cap). PATH is created if missing; writing never raises."""

    def __init__(self, path: str, head: int | None, segment: int | None) -> None:
        if (head is None) != (segment is None) or (segment is not None and segment <= 0) or (head or 0) < 0:
            raise ValueError("head and segment go together; segment > 0, head >= 0")
        self._path = path
        self._head = head
        self._segment = segment
        self._fd: int | None = os.open(path, _WRITE | os.O_CREAT, 0o600)
        self._written = os.fstat(self._fd).st_size
        self._start = 0  # where the open file's bytes begin
        self._limit = head  # how many bytes the open file takes (None: all)
        self._kept: list[str] = []  # segments on disk, oldest first

    @property
    def written(self) -> int:
        """Bytes of the stream so far, dropped ones included."""
        return self._written

    def _room(self) -> int:
        """Bytes the open file still takes (0: open the next one)."""
        if self._fd is None:
            return 0
        return 1 << 62 if self._limit is None else self._limit - (self._written - self._start)

    def _next_segment(self) -> None:
        self.close()
        name = f"{self._path}.{self._written}"
        self._fd = os.open(name, _WRITE | os.O_CREAT | os.O_TRUNC, 0o600)
        self._start, self._limit = self._written, self._segment
        self._kept.append(name)
        if self._segment is None:
            return  # no cap: a segment only follows dropped bytes, and stays
        for old in self._kept[:-2]:
            with contextlib.suppress(OSError):
                os.unlink(old)
        del self._kept[:-2]

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                if self._room() <= 0:
                    self._next_segment()
                assert self._fd is not None
                n = os.write(self._fd, view[: self._room()])
            except OSError:
                self.close()  # dropped: the next bytes start a segment at their own offset
                self._written += len(view)
                return
            self._written += n
            view = view[n:]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
