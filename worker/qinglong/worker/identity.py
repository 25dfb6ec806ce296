"""A spawned task's durable identity and this process's own children (the Worker's process layer;
see executor.py and controller.py). `ProcessHandle` is what the journal keeps: pid == pgid (the
runner wrapper leads its own session), the start time from `/proc/<pid>/stat` (field 22) and the
boot id; `boottime_ns` is the local Lease clock (CLOCK_BOOTTIME). The wrappers this process spawned
and has not reaped are registered here: an unreaped child's pid cannot be reused, so such a pid is
provably ours. Touches: /proc and waitpid on this process's children. Standard library only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from qinglong.worker.runner import stat_fields

_BOOT_ID_PATH: Final = "/proc/sys/kernel/random/boot_id"


@dataclass(frozen=True)
class ProcessHandle:
    """The durable identity of a spawned task (stored in the journal as `to_dict()`)."""

    pid: int
    pgid: int
    start_time: int
    boot_id: str
    log_path: str
    status_path: str
    launch_nonce: str

    def __post_init__(self) -> None:
        for name in ("pid", "pgid"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"ProcessHandle.{name} must be a positive int")
        if type(self.start_time) is not int or self.start_time < 0:
            raise ValueError("ProcessHandle.start_time must be a non-negative int")
        for name in ("boot_id", "log_path", "status_path", "launch_nonce"):
            value = getattr(self, name)
            if type(value) is not str or not value or "\x00" in value:
                raise ValueError(f"ProcessHandle.{name} must be a non-empty str")

    def to_dict(self) -> dict[str, object]:
        return {
            "pid": self.pid,
            "pgid": self.pgid,
            "start_time": self.start_time,
            "boot_id": self.boot_id,
            "log_path": self.log_path,
            "status_path": self.status_path,
            "launch_nonce": self.launch_nonce,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> ProcessHandle:
        """Strict: exactly the keys of `to_dict()`, with exactly their types (ValueError otherwise)."""
        if not isinstance(d, Mapping):
            raise ValueError("a process handle must be a mapping")
        expected = {"pid", "pgid", "start_time", "boot_id", "log_path", "status_path", "launch_nonce"}
        keys = set(d.keys())
        if keys != expected:
            raise ValueError(
                f"process handle keys: missing {sorted(expected - keys)}, unknown {sorted(map(str, keys - expected))}"
            )
        pid, pgid, start_time = d["pid"], d["pgid"], d["start_time"]
        boot, log_path, status_path, nonce = d["boot_id"], d["log_path"], d["status_path"], d["launch_nonce"]
        if type(pid) is not int or type(pgid) is not int or type(start_time) is not int:
            raise ValueError("process handle pid, pgid and start_time must be ints")
        if type(boot) is not str or type(log_path) is not str or type(status_path) is not str:
            raise ValueError("process handle boot_id, log_path and status_path must be strs")
        if type(nonce) is not str:
            raise ValueError("process handle launch_nonce must be a str")
        return cls(pid, pgid, start_time, boot, log_path, status_path, nonce)


@dataclass(frozen=True)
class ExitStatus:
    """How the task ended, from the runner's status file: an exit code, or the signal that ended it."""

    exit_code: int | None
    signal: int | None


def boot_id() -> str:
    """This boot's id (/proc/sys/kernel/random/boot_id); a changed boot id means nothing survived."""
    with open(_BOOT_ID_PATH, encoding="ascii") as f:
        return f.read().strip()


def boottime_ns() -> int:
    """CLOCK_BOOTTIME in ns: monotonic within a boot and counting through suspend (the lease clock)."""
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME)


@dataclass(frozen=True)
class _Stat:
    state: str
    pgrp: int
    start_time: int


def parse_stat(data: bytes) -> _Stat:
    rest = stat_fields(data)
    return _Stat(rest[0].decode("ascii", "replace"), int(rest[2]), int(rest[19]))


def read_stat(pid: int) -> _Stat | None:
    """None when the process is gone; PermissionError and other OSErrors propagate."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    if not data:
        return None
    return parse_stat(data)


def process_start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (clock ticks since boot), or None if the process is gone."""
    if type(pid) is not int or pid < 1:
        raise ValueError("pid must be a positive int")
    st = read_stat(pid)
    return None if st is None else st.start_time


# The runner wrappers this process spawned and has not reaped yet. An unreaped child's pid cannot be
# reused, so a pid in this set is provably ours.
CHILDREN: set[int] = set()


def reap(pid: int) -> int | None:
    """Reap the wrapper `pid` if it is our exited child; its wait status, or None. Call it only for a
    pid whose identity is proven (a registered child, or a zombie whose start time matches)."""
    try:
        reaped, wait_status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        CHILDREN.discard(pid)
        return None
    if reaped == 0:
        return None
    CHILDREN.discard(pid)
    return wait_status


def reap_finished() -> None:
    """Reap every wrapper of ours that has exited, so finished tasks leave no zombies behind."""
    for pid in list(CHILDREN):
        reap(pid)
