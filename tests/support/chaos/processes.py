"""Small process helpers of a run of real processes: adopt orphaned task runners (child subreaper), reap
them, and find what still runs under a folder. Touches: this process's child-subreaper flag, /proc (read),
waitpid of its zombie children."""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Final

PR_SET_CHILD_SUBREAPER: Final = 36


@contextlib.contextmanager
def child_subreaper() -> Iterator[None]:
    """Orphaned task runners of killed Workers become our children (reaped here, not zombies of PID 1)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    try:
        yield
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of a process, from /proc."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    rest = data[data.rfind(b")") + 1 :].split()
    return rest[0].decode(), int(rest[1])


def reap_orphans(keep: set[int]) -> None:
    """waitpid the zombie children of this process that no Popen tracks (adopted task runners)."""
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in keep:
            continue
        st = _stat(int(name))
        if st is not None and st[1] == me and st[0] == "Z":
            with contextlib.suppress(ChildProcessError):
                os.waitpid(int(name), os.WNOHANG)


def processes_under(root: Path) -> list[int]:
    """Live processes whose command line names the root folder (task runners and tasks of this run)."""
    found, me = [], os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            cmd = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        st = _stat(int(name))
        if str(root).encode() in cmd and st is not None and st[0] not in ("Z", "X"):
            found.append(int(name))
    return found
