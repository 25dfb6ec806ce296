"""The runner wrapper: `python -m qinglong.worker.runner --log LOG --status STATUS [--ready-fd N]
[--identity FILE] [--lease FILE --grace SECONDS] [--cwd DIR] [--uid N] [--gid N] [--groups N,...]
[--spool HEAD,SEGMENT] -- argv...` (docs/architecture.md §7, Executor).

`--cwd`, `--uid`, `--gid` and `--groups` are where and as whom the child runs (the Executor has
decided them from the plan and the Worker's policy): the wrapper itself keeps the Worker's user, so
it can always write LOG, the stderr file and STATUS; only the child changes directory, groups and
user before exec.

The Executor starts this module in a new session (its own process group). It starts `argv` as its
child in the same group, with stdin from /dev/null and stdout and stderr on two pipes, which the wrapper
copies to their spools (spool.py): stdout to LOG, stderr to LOG's sibling with the suffix `.err`
(`stderr_path(LOG)`: `<nonce>.log` → `<nonce>.err`; derived, not an option, so the Executor and the wrapper
name it from one fact; a LOG ending in `.err` is refused), 0600, so the two streams stay apart. With `--spool`
each stream keeps its first HEAD bytes and its last SEGMENT to 2 x SEGMENT bytes on disk (without it, all of
them). The copy goes on while the wrapper waits, the grace of a stop included; once the child has exited, what
the pipes hold is copied and they are closed (a process the task left behind gets EPIPE if it writes on: its
output is not the Run's, and it cannot hold the Run's end). Then the wrapper writes STATUS atomically (tmp,
fsync, rename, fsync dir) as `{"exitCode": int|null, "signal": int|null}` and exits with the child's code (or
128+signal), so the exit status survives a Worker restart, and a STATUS says the spools are complete.

SIGTERM, SIGINT and SIGHUP do not end the wrapper: the group signal reaches the child, and the
wrapper still records how the child ended. If the child cannot be started, STATUS records 127
(not found) or 126 (not executable), one line is appended to the stderr file, and the wrapper exits
with that code. The wrapper's own lines (that one, and the dead-man's switch firing) go to the
stderr spool too; LOG holds the task's stdout only. `--ready-fd` (optional, used by the Executor): a
pipe the wrapper writes one byte to and closes once its signal handlers are installed, the child
has been started and its output is being copied (or its start failure recorded).

`--identity FILE`: before it starts the child, the wrapper writes `{"pid", "startTime", "bootId"}`
(its own identity) to FILE atomically, so a Worker restarted mid-launch can tell a task that never
started (no FILE, no wrapper) from one to adopt or one that ran (worker/launch.py).

`--lease FILE` is the dead-man's switch: FILE holds the Worker's conservative local Lease expiry
(CLOCK_BOOTTIME nanoseconds, decimal), which the Worker rewrites after every renewal it persisted.
The wrapper re-reads FILE once a second (woken early by its child's exit), and once the expiry it
names has passed it stops the task by itself: SIGTERM to the group,
`--grace` seconds, then SIGKILL to every other member of the group, and records the child's end as
usual. So a task never outlives its Lease, whether its Worker is alive, frozen, dead, out of disk or
without its journal. A FILE that cannot be read keeps the last expiry read.

Standard library only; nothing happens at import.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType

from qinglong.worker import spool

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_USAGE = (
    "usage: python -m qinglong.worker.runner --log LOG --status STATUS [--ready-fd N] "
    "[--identity FILE] [--lease FILE --grace SECONDS] [--cwd DIR] [--uid N] [--gid N] [--groups N,...] "
    "[--spool HEAD,SEGMENT] -- argv..."
)
ERR_SUFFIX = ".err"
LEASE_CHECK_S = 1.0  # how often the dead-man's switch re-reads its lease file
PIPE_READ_BYTES = 2**16  # one read of a task's pipe
POLL_S = 0.05  # how often a wait looks for the child's exit where there is no pidfd
_OPTIONS = (
    "--log",
    "--status",
    "--ready-fd",
    "--identity",
    "--lease",
    "--grace",
    "--cwd",
    "--uid",
    "--gid",
    "--groups",
    "--spool",
)


@dataclass(frozen=True)
class _Args:
    log: str
    status: str
    ready_fd: int | None
    argv: list[str]
    lease: str | None = None
    grace_s: float = 5.0
    identity: str | None = None
    cwd: str | None = None
    uid: int | None = None
    gid: int | None = None
    groups: tuple[int, ...] | None = None
    spool: tuple[int, int] | tuple[None, None] = (None, None)


def _ids(text: str, option: str) -> tuple[int, ...]:
    parts = text.split(",") if text else []
    if not all(p.isdigit() for p in parts):
        raise _UsageError(f"{option} takes numeric ids")
    return tuple(int(p) for p in parts)


class _UsageError(Exception):
    pass


def _parse(args: Sequence[str]) -> _Args:
    opts: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            argv = list(args[i + 1 :])
            break
        if arg in _OPTIONS and i + 1 < len(args) and arg not in opts:
            opts[arg] = args[i + 1]
            i += 2
            continue
        raise _UsageError(f"unexpected argument {arg!r}")
    else:
        raise _UsageError("missing '--' before the task argv")
    if "--log" not in opts or "--status" not in opts:
        raise _UsageError("--log and --status are required")
    if not argv:
        raise _UsageError("the task argv is empty")
    ready_fd: int | None = None
    if "--ready-fd" in opts:
        text = opts["--ready-fd"]
        if not text.isdigit():
            raise _UsageError("--ready-fd takes a file descriptor number")
        ready_fd = int(text)
    if ("--lease" in opts) != ("--grace" in opts):
        raise _UsageError("--lease and --grace go together")
    grace_s = 5.0
    if "--grace" in opts:
        try:
            grace_s = float(opts["--grace"])
        except ValueError:
            raise _UsageError("--grace takes seconds") from None
        if not 0 <= grace_s <= 3600:
            raise _UsageError("--grace takes 0..3600 seconds")
    uid = _ids(opts["--uid"], "--uid") if "--uid" in opts else None
    gid = _ids(opts["--gid"], "--gid") if "--gid" in opts else None
    if (uid is not None and len(uid) != 1) or (gid is not None and len(gid) != 1):
        raise _UsageError("--uid and --gid take one id")
    if opts["--log"].endswith(ERR_SUFFIX):
        raise _UsageError(f"LOG must not end in {ERR_SUFFIX} (the stderr file is named after it)")
    return _Args(
        opts["--log"],
        opts["--status"],
        ready_fd,
        argv,
        opts.get("--lease"),
        grace_s,
        opts.get("--identity"),
        opts.get("--cwd"),
        None if uid is None else uid[0],
        None if gid is None else gid[0],
        _ids(opts["--groups"], "--groups") if "--groups" in opts else None,
        _spool(opts["--spool"]) if "--spool" in opts else (None, None),
    )


def _spool(text: str) -> tuple[int, int]:
    head, _, segment = text.partition(",")
    if not (head.isascii() and head.isdigit() and segment.isascii() and segment.isdigit()) or int(segment) == 0:
        raise _UsageError("--spool takes HEAD,SEGMENT bytes (SEGMENT > 0)")
    return int(head), int(segment)


def stderr_path(log: str) -> str:
    """The file a launch's stderr is appended to: LOG with its suffix replaced by `.err`."""
    return os.path.splitext(log)[0] + ERR_SUFFIX


def _ignore_stop_signal(signum: int, frame: FrameType | None) -> None:
    """Stay alive: the child (same process group) takes the signal, and its end is recorded."""


def write_status_atomically(path: str, exit_code: int | None, signum: int | None) -> None:
    """Write `{"exitCode": ..., "signal": ...}` to `path`: tmp file (0600), fsync, rename, fsync dir."""
    _write_json_atomically(path, {"exitCode": exit_code, "signal": signum})


def _write_identity(path: str) -> None:
    with open("/proc/self/stat", "rb") as f:
        stat = f.read()
    with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
        boot = f.read().strip()
    start_time = int(stat_fields(stat)[19])  # field 22
    _write_json_atomically(path, {"pid": os.getpid(), "startTime": start_time, "bootId": boot})


def _write_json_atomically(path: str, obj: dict[str, object]) -> None:
    write_atomically(path, json.dumps(obj, separators=(",", ":")).encode())


def write_atomically(path: str | os.PathLike[str], data: bytes, *, durable: bool = True) -> None:
    """Replace `path` with `data` at once: tmp file (0600), rename; `durable` adds fsync of the file
    and of its folder (a status must survive a crash; a lease file need not survive a reboot)."""
    path = os.fspath(path)
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if not durable:
        return
    dir_fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def stat_fields(data: bytes) -> list[bytes]:
    """The fields of a /proc/<pid>/stat line after the comm (field 3 on). The comm may hold spaces
    and parentheses, so they are split after the LAST ')'. ValueError on a malformed line."""
    close = data.rfind(b")")
    if close < 0:
        raise ValueError("malformed /proc stat line")
    rest = data[close + 1 :].split()
    if len(rest) < 20:  # rest[0] is field 3 (state), rest[2] field 5 (pgrp), rest[19] field 22 (starttime)
        raise ValueError("short /proc stat line")
    return rest


def _signal_ready(ready_fd: int | None) -> None:
    if ready_fd is None:
        return
    try:
        os.write(ready_fd, b"R")
    except OSError:
        pass  # the Executor stopped waiting (cancelled): the task runs on regardless
    finally:
        os.close(ready_fd)


def _close_stray_fds(keep: int | None) -> None:
    """Close descriptors above stderr leaked from the Worker (a lock file held by a long-lived task
    would outlive the Worker), except the ready pipe."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return
    for fd in fds:
        if fd > 2 and fd != keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def _start_failure_code(exc: OSError) -> int:
    return 127 if exc.errno in (errno.ENOENT, errno.ENOTDIR) else 126


def read_lease(path: str) -> int | None:
    """The expiry in FILE (CLOCK_BOOTTIME ns), or None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            text = f.read(64)
        return int(text.decode("ascii").strip())
    except (OSError, ValueError):
        return None


def group_members(pgid: int, but: int | None = None) -> list[int]:
    """The pids of process group `pgid` but `but` (default: this process, the wrapper), read from /proc."""
    me, members = os.getpid() if but is None else but, []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                pgrp = int(stat_fields(f.read())[2])
        except (OSError, ValueError):
            continue
        if pgrp == pgid:
            members.append(int(name))
    return members


class _Pump:
    """Copies the child's stdout and stderr pipes into their spools (spool.Writer) while waiting for the child. A
    pidfd wakes the wait at the child's exit (without one, the wait looks every POLL_S)."""

    def __init__(self, child: subprocess.Popen[bytes], writers: dict[int, spool.Writer]) -> None:
        self._child = child
        self._writers = writers
        self._selector = selectors.DefaultSelector()
        for fd in writers:
            self._selector.register(fd, selectors.EVENT_READ)
        self._pidfd: int | None = None
        with contextlib.suppress(OSError, AttributeError):
            self._pidfd = os.pidfd_open(child.pid)
            self._selector.register(self._pidfd, selectors.EVENT_READ)

    def _copy(self, fd: int) -> bool:
        """One read of a pipe into its spool; whether it gave bytes (at its end the pipe is closed)."""
        try:
            data = os.read(fd, PIPE_READ_BYTES)
        except BlockingIOError:
            return False
        if data:
            self._writers[fd].write(data)
            return True
        self._selector.unregister(fd)
        os.close(fd)
        del self._writers[fd]
        return False

    def _select(self, timeout_s: float | None) -> None:
        for key, _ in self._selector.select(timeout_s):
            if key.fd in self._writers:
                self._copy(key.fd)

    def wait(self, timeout_s: float | None) -> int | None:
        """Copy output until the child exits (its return code) or `timeout_s` passes (None)."""
        end = None if timeout_s is None else time.monotonic() + max(0.0, timeout_s)
        while (returncode := self._child.poll()) is None:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return None
            if self._pidfd is None:  # nothing wakes the wait at the child's exit: look every POLL_S
                left = POLL_S if left is None else min(POLL_S, left)
            self._select(left)
        return returncode

    def copy_for(self, seconds: float) -> None:
        """Copy output for `seconds` (the child has exited: members of its group may still write)."""
        if self._pidfd is not None:
            self._selector.unregister(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            self._select(left)  # with both pipes closed, a plain sleep

    def close(self) -> None:
        """What the pipes hold now goes to the spools, then the pipes close: a straggler of the group that still
        writes gets EPIPE (its output after the task's end is not the Run's). Bounded by the bytes already there."""
        for fd in list(self._writers):
            os.set_blocking(fd, False)
            while fd in self._writers and self._copy(fd):
                pass
            if fd in self._writers:
                self._selector.unregister(fd)
                os.close(fd)
                del self._writers[fd]
        if self._pidfd is not None:
            os.close(self._pidfd)
        self._selector.close()


def _supervise(pump: _Pump, lease: str, grace_s: float, err: spool.Writer) -> int:
    """Wait for the child while the Lease holds; past the expiry FILE names, stop the group. FILE is
    re-read at least every LEASE_CHECK_S: a renewal may also move the expiry EARLIER (a Lease TTL
    shorter than the offer's). Output is copied throughout, the grace included (a task that logs while it
    stops is not blocked on a full pipe)."""
    expiry = read_lease(lease)
    while True:
        now = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
        if expiry is not None and now >= expiry:
            break
        wait_s = LEASE_CHECK_S if expiry is None else min(LEASE_CHECK_S, (expiry - now) / 1e9)
        returncode = pump.wait(wait_s)
        if returncode is not None:
            return returncode
        expiry = read_lease(lease) or expiry
    err.write(b"qinglong-runner: the Lease expired locally without renewal; stopping the task\n")
    pgid = os.getpgrp()
    with contextlib.suppress(OSError):
        os.killpg(pgid, signal.SIGTERM)  # the wrapper ignores it; the task gets it
    end = time.monotonic() + grace_s
    while (left := end - time.monotonic()) > 0:
        if pump.wait(left) is None:
            break
        if not group_members(pgid):
            return _exited(pump)
        pump.copy_for(min(0.05, left))  # the task left members behind: they get the grace too
    for _ in range(100):  # bounded: a fork bomb cannot keep the wrapper here forever
        members = group_members(pgid)
        if not members:
            break
        for pid in members:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
    return _exited(pump)


def _exited(pump: _Pump) -> int:
    """The child's return code, waiting (and copying its output) until it exits."""
    returncode = pump.wait(None)
    assert returncode is not None
    return returncode


def main(args: Sequence[str] | None = None) -> int:
    """Run the wrapper; returns the wrapper's exit code."""
    try:
        parsed = _parse(sys.argv[1:] if args is None else args)
    except _UsageError as exc:
        print(f"{_USAGE}\n{exc}", file=sys.stderr)
        return 2
    _close_stray_fds(keep=parsed.ready_fd)
    if parsed.ready_fd is not None:
        os.set_inheritable(parsed.ready_fd, False)  # never leaks into the task
    for signum in _STOP_SIGNALS:
        signal.signal(signum, _ignore_stop_signal)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())  # the Worker's blocked set is not the task's

    if parsed.identity is not None:
        _write_identity(parsed.identity)
    out = spool.Writer(parsed.log, *parsed.spool)
    err = spool.Writer(stderr_path(parsed.log), *parsed.spool)
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    try:
        child = subprocess.Popen(
            parsed.argv,
            stdin=subprocess.DEVNULL,
            stdout=out_w,
            stderr=err_w,
            close_fds=True,
            cwd=parsed.cwd,
            user=parsed.uid,
            group=parsed.gid,
            extra_groups=parsed.groups,
        )
    except OSError as exc:
        code = _start_failure_code(exc)
        line = f"qinglong-runner: cannot execute {parsed.argv[0]!r}: {exc.strerror or exc} (exit {code})\n"
        err.write(line.encode("utf-8", "backslashreplace"))
        for fd in (out_r, err_r):
            os.close(fd)
        out.close()
        err.close()
        write_status_atomically(parsed.status, code, None)
        _signal_ready(parsed.ready_fd)
        return code
    finally:
        os.close(out_w)
        os.close(err_w)

    pump = _Pump(child, {out_r: out, err_r: err})
    _signal_ready(parsed.ready_fd)
    # the wait is retried across the (ignored) stop signals
    returncode = _exited(pump) if parsed.lease is None else _supervise(pump, parsed.lease, parsed.grace_s, err)
    pump.close()  # the spools are complete before the status says the task ended
    out.close()
    err.close()
    if returncode < 0:
        write_status_atomically(parsed.status, None, -returncode)
        return 128 - returncode
    write_status_atomically(parsed.status, returncode, None)
    return returncode


if __name__ == "__main__":
    raise SystemExit(main())
