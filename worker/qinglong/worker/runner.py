"""The runner wrapper: `python -m qinglong.worker.runner --log LOG --status STATUS [--ready-fd N]
[--identity FILE] [--lease FILE --grace SECONDS] [--cwd DIR] [--uid N] [--gid N] [--groups N,...]
-- argv...` (docs/architecture.md §7, Executor).

`--cwd`, `--uid`, `--gid` and `--groups` are where and as whom the child runs (the Executor has
decided them from the plan and the Worker's policy): the wrapper itself keeps the Worker's user, so
it can always write LOG, the stderr file and STATUS; only the child changes directory, groups and
user before exec.

The Executor starts this module in a new session (its own process group). It starts `argv` as its
child in the same group, with stdin from /dev/null, stdout appended to LOG and stderr appended to
LOG's sibling with the suffix `.err` (`stderr_path(LOG)`: `<nonce>.log` → `<nonce>.err`; derived, not
an option, so the Executor and the wrapper name it from one fact; a LOG ending in `.err` is refused),
both O_APPEND, 0600, so the two streams stay apart. It waits for the child, writes STATUS atomically
(tmp, fsync, rename, fsync dir) as `{"exitCode": int|null, "signal": int|null}` and exits with the
child's code (or 128+signal), so the exit status survives a Worker restart.

SIGTERM, SIGINT and SIGHUP do not end the wrapper: the group signal reaches the child, and the
wrapper still records how the child ended. If the child cannot be started, STATUS records 127
(not found) or 126 (not executable), one line is appended to the stderr file, and the wrapper exits
with that code. The wrapper's own lines (that one, and the dead-man's switch firing) go to the
stderr file too; LOG holds the task's stdout only. `--ready-fd` (optional, used by the Executor): a
pipe the wrapper writes one byte to and closes once its signal handlers are installed and the child
has been started (or its start failure recorded).

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
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_USAGE = (
    "usage: python -m qinglong.worker.runner --log LOG --status STATUS [--ready-fd N] "
    "[--identity FILE] [--lease FILE --grace SECONDS] [--cwd DIR] [--uid N] [--gid N] [--groups N,...] -- argv..."
)
ERR_SUFFIX = ".err"
LEASE_CHECK_S = 1.0  # how often the dead-man's switch re-reads its lease file
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
    )


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


def _wait_child(child: subprocess.Popen[bytes], timeout_s: float | None) -> int | None:
    """The child's return code once it exits, or None after `timeout_s` (SIGCHLD is blocked, so its
    arrival ends the wait; nothing polls)."""
    returncode = child.poll()
    if returncode is not None or timeout_s is None:
        return child.wait() if returncode is None else returncode
    signal.sigtimedwait((signal.SIGCHLD,), max(0.0, timeout_s))
    return child.poll()


def _supervise(child: subprocess.Popen[bytes], lease: str, grace_s: float, err_path: str) -> int:
    """Wait for the child while the Lease holds; past the expiry FILE names, stop the group. FILE is
    re-read at least every LEASE_CHECK_S: a renewal may also move the expiry EARLIER (a Lease TTL
    shorter than the offer's)."""
    expiry = read_lease(lease)
    while True:
        now = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
        if expiry is not None and now >= expiry:
            break
        wait_s = LEASE_CHECK_S if expiry is None else min(LEASE_CHECK_S, (expiry - now) / 1e9)
        returncode = _wait_child(child, wait_s)
        if returncode is not None:
            return returncode
        expiry = read_lease(lease) or expiry
    _append(err_path, "qinglong-runner: the Lease expired locally without renewal; stopping the task\n")
    pgid = os.getpgrp()
    with contextlib.suppress(OSError):
        os.killpg(pgid, signal.SIGTERM)  # the wrapper ignores it; the task gets it
    end = time.monotonic() + grace_s
    while (left := end - time.monotonic()) > 0:
        if child.poll() is None:
            _wait_child(child, left)
        elif not group_members(pgid):
            return child.wait()
        else:
            time.sleep(min(0.05, left))  # the task left members behind: they get the grace too
    for _ in range(100):  # bounded: a fork bomb cannot keep the wrapper here forever
        members = group_members(pgid)
        if not members:
            break
        for pid in members:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
    return child.wait()


def _append(path: str, line: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


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
    err = stderr_path(parsed.log)
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW
    log_fd = os.open(parsed.log, flags, 0o600)
    try:
        err_fd = os.open(err, flags, 0o600)
        try:
            child = subprocess.Popen(
                parsed.argv,
                stdin=subprocess.DEVNULL,
                stdout=log_fd,
                stderr=err_fd,
                close_fds=True,
                cwd=parsed.cwd,
                user=parsed.uid,
                group=parsed.gid,
                extra_groups=parsed.groups,
            )
        except OSError as exc:
            code = _start_failure_code(exc)
            line = f"qinglong-runner: cannot execute {parsed.argv[0]!r}: {exc.strerror or exc} (exit {code})\n"
            os.write(err_fd, line.encode("utf-8", "backslashreplace"))
            write_status_atomically(parsed.status, code, None)
            _signal_ready(parsed.ready_fd)
            return code
        finally:
            os.close(err_fd)
    finally:
        os.close(log_fd)

    # SIGCHLD is blocked only now, after the child's exec: the task keeps an empty blocked set.
    signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGCHLD,))
    _signal_ready(parsed.ready_fd)
    # child.wait() is retried across the (ignored) stop signals
    returncode = child.wait() if parsed.lease is None else _supervise(child, parsed.lease, parsed.grace_s, err)
    if returncode < 0:
        write_status_atomically(parsed.status, None, -returncode)
        return 128 - returncode
    write_status_atomically(parsed.status, returncode, None)
    return returncode


if __name__ == "__main__":
    raise SystemExit(main())
