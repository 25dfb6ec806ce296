"""The runner wrapper: `python -m qinglong.worker.runner --log LOG --status STATUS [--ready-fd N] -- argv...`
(ARCHITECTURE §7, Executor).

The Executor starts this module in a new session (its own process group). It starts `argv` as its
child in the same group, with stdin from /dev/null and stdout+stderr appended to LOG (O_APPEND,
0600), waits for it, writes STATUS atomically (tmp, fsync, rename, fsync dir) as
`{"exitCode": int|null, "signal": int|null}` and exits with the child's code (or 128+signal), so the
exit status survives a Worker restart.

SIGTERM, SIGINT and SIGHUP do not end the wrapper: the group signal reaches the child, and the
wrapper still records how the child ended. If the child cannot be started, STATUS records 127
(not found) or 126 (not executable), one line is appended to LOG, and the wrapper exits with that
code. `--ready-fd` (optional, used by the Executor): a pipe the wrapper writes one byte to and
closes once its signal handlers are installed and the child has been started (or its start failure
recorded).

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
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_USAGE = "usage: python -m qinglong.worker.runner --log LOG --status STATUS [--ready-fd N] -- argv..."


@dataclass(frozen=True)
class _Args:
    log: str
    status: str
    ready_fd: int | None
    argv: list[str]


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
        if arg in ("--log", "--status", "--ready-fd") and i + 1 < len(args) and arg not in opts:
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
    return _Args(opts["--log"], opts["--status"], ready_fd, argv)


def _ignore_stop_signal(signum: int, frame: FrameType | None) -> None:
    """Stay alive: the child (same process group) takes the signal, and its end is recorded."""


def write_status_atomically(path: str, exit_code: int | None, signum: int | None) -> None:
    """Write `{"exitCode": ..., "signal": ...}` to `path`: tmp file (0600), fsync, rename, fsync dir."""
    data = json.dumps({"exitCode": exit_code, "signal": signum}, separators=(",", ":")).encode()
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


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

    log_fd = os.open(parsed.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        try:
            child = subprocess.Popen(
                parsed.argv,
                stdin=subprocess.DEVNULL,
                stdout=log_fd,
                stderr=log_fd,
                close_fds=True,
            )
        except OSError as exc:
            code = _start_failure_code(exc)
            line = f"qinglong-runner: cannot execute {parsed.argv[0]!r}: {exc.strerror or exc} (exit {code})\n"
            os.write(log_fd, line.encode("utf-8", "backslashreplace"))
            write_status_atomically(parsed.status, code, None)
            _signal_ready(parsed.ready_fd)
            return code
    finally:
        os.close(log_fd)

    _signal_ready(parsed.ready_fd)
    returncode = child.wait()  # retried across the (ignored) stop signals
    if returncode < 0:
        write_status_atomically(parsed.status, None, -returncode)
        return 128 - returncode
    write_status_atomically(parsed.status, returncode, None)
    return returncode


if __name__ == "__main__":
    raise SystemExit(main())
