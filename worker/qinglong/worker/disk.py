"""The disk budget: whether this Worker may take more work, by the free space of the file system its `work_dir` is
on. Reads statvfs of `work_dir` and, at most every USAGE_EVERY_S, the sizes under `work_dir` and of the journal's
files (this Worker's own usage, for the log and `qinglong-worker status`; at most USAGE_MAX_ENTRIES entries are
counted); writes nothing. Standard library only; nothing happens at import or construction.

Below `min_free_bytes` free (to an unprivileged user: statvfs f_bavail) the lifecycle pulls nothing; it still
supervises, renews and completes what runs. The change is logged once each way: `disk.low` (free, needed, used)
when pulling stops, `disk.ok` when it resumes. A work_dir that cannot be measured counts as low.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from qinglong.wire.logline import emit

log = logging.getLogger("qinglong.worker")

MIB: Final = 1 << 20
MIN_FREE_MIB: Final = 32  # worker.toml min_free_mib
USAGE_EVERY_S: Final = 60.0
USAGE_MAX_ENTRIES: Final = 100_000


def usage(paths: tuple[Path, ...], limit: int = USAGE_MAX_ENTRIES) -> int:
    """Bytes allocated to `paths` and everything under them (st_blocks, symlinks not followed), counting at most
    `limit` entries; an entry that vanishes or cannot be read counts nothing."""
    total, seen, todo = 0, 0, [os.fspath(p) for p in paths]
    while todo and seen < limit:
        path = todo.pop()
        try:
            st = os.lstat(path)
            total += st.st_blocks * 512
            seen += 1
            if stat.S_ISDIR(st.st_mode):
                with os.scandir(path) as entries:
                    todo.extend(e.path for e in entries)
        except OSError:
            continue
    return total


@dataclass
class DiskBudget:
    """One Worker's view of its disk (module docstring)."""

    work_dir: Path
    journal: Path
    min_free_bytes: int
    low: bool = False
    free_bytes: int | None = None
    used_bytes: int | None = None
    _used_at: float | None = None

    def check(self) -> bool:
        """Measure (usage at most every USAGE_EVERY_S); whether pulling may go on. Logs a change once."""
        now = time.monotonic()
        if self._used_at is None or now - self._used_at >= USAGE_EVERY_S:
            self._used_at = now
            files = tuple(self.journal.with_name(self.journal.name + end) for end in ("", "-wal", "-shm"))
            self.used_bytes = usage((self.work_dir, *files))
        where = self.work_dir
        while not where.exists() and where != where.parent:  # not made yet: the file system it will be on
            where = where.parent
        try:
            st = os.statvfs(where)
            self.free_bytes = st.f_bavail * st.f_frsize
        except OSError:
            self.free_bytes = None
        low = self.free_bytes is None or self.free_bytes < self.min_free_bytes
        if low != self.low:
            self.low = low
            emit(log, logging.WARNING if low else logging.INFO, "disk.low" if low else "disk.ok",
                 work_dir=str(self.work_dir), free_mib=_mib(self.free_bytes), needed_mib=_mib(self.min_free_bytes),
                 used_mib=_mib(self.used_bytes))  # fmt: skip
        return not low

    def status(self) -> dict[str, Any]:
        """What the status file keeps of it."""
        return {"low": self.low, "free_bytes": self.free_bytes, "min_free_bytes": self.min_free_bytes,
                "used_bytes": self.used_bytes}  # fmt: skip


def _mib(value: int | None) -> float | None:
    return None if value is None else round(value / MIB, 1)
