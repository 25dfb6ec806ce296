"""The Worker's local process layer (ARCHITECTURE §7; ADR-0118 §3-§4): the Executor that spawns a
task under the runner wrapper, the durable process handle, and the LocalProcessController that
stops exactly that process group and nothing else.

- `Executor.spawn` validates the durable deadline fields (one-sided, negative or unsafe values are
  refused; nothing is spawned) but never arms a timer: the control plane is the timeout authority.
  It starts `python -m qinglong.worker.runner` in a new session and returns once the wrapper has
  installed its signal handlers and started the task. Log, status and lease files live under
  `work_dir/<offer_id>/` (0700), named after the launch nonce; a nonce is launched at most once.
  The lease file is the wrapper's dead-man's switch (see runner.py): spawn writes the local Lease
  expiry into it and `extend_lease` rewrites it after every persisted renewal.
- `ProcessHandle` is the durable identity: pid == pgid (new session), the start time from
  `/proc/<pid>/stat` (field 22), and the boot id.
- `LocalProcessController.stop` signals a process group only while the group leader's identity is
  proven (same boot, same start time, same group, not a zombie): TERM, a grace, then KILL.

Touches: `work_dir`, `/proc`, child processes, signals. Standard library only; nothing happens at
import or construction.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, TypeAlias

import qinglong
from qinglong.worker.runner import stat_fields, write_atomically

__all__ = [
    "Executor",
    "ExecutorRefused",
    "ExitStatus",
    "LocalProcessController",
    "ProcessHandle",
    "StopOutcome",
    "Verification",
    "boot_id",
    "boottime_ns",
    "process_start_time",
]

MAX_SAFE_INTEGER: Final = 2**53 - 1
_BOOT_ID_PATH: Final = "/proc/sys/kernel/random/boot_id"
_RUNNER_MODULE: Final = "qinglong.worker.runner"
# How long spawn() waits for the wrapper to report it is ready (handlers installed, task started).
# Past it the wrapper is still running under a known identity, so the handle is returned anyway.
_READY_TIMEOUT_S: Final = 30.0
# How long stop() waits for the group leader to disappear after SIGKILL.
_KILL_WAIT_S: Final = 5.0

StopOutcome: TypeAlias = Literal["stopped", "already_exited", "unverified"]
Verification: TypeAlias = Literal["alive", "exited", "unverified"]


class ExecutorRefused(Exception):
    """The Executor refused a spawn request; nothing was spawned and no file was created.

    `code` is stable: deadline.one_sided, deadline.negative, deadline.unsafe, argv.empty, env.invalid,
    and (also) argv.invalid, offer_id.invalid, launch_nonce.invalid, launch.duplicate.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


# --------------------------------------------------------------------------- identity


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


def _parse_stat(data: bytes) -> _Stat:
    rest = stat_fields(data)
    return _Stat(rest[0].decode("ascii", "replace"), int(rest[2]), int(rest[19]))


def _read_stat(pid: int) -> _Stat | None:
    """None when the process is gone; PermissionError and other OSErrors propagate."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    if not data:
        return None
    return _parse_stat(data)


def process_start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (clock ticks since boot), or None if the process is gone."""
    if type(pid) is not int or pid < 1:
        raise ValueError("pid must be a positive int")
    st = _read_stat(pid)
    return None if st is None else st.start_time


# --------------------------------------------------------------------------- children of this process

# The runner wrappers this process spawned and has not reaped yet. An unreaped child's pid cannot be
# reused, so a pid in this set is provably ours.
_CHILDREN: set[int] = set()


def _reap(pid: int) -> int | None:
    """Reap the wrapper `pid` if it is our exited child; its wait status, or None. Call it only for a
    pid whose identity is proven (a registered child, or a zombie whose start time matches)."""
    try:
        reaped, wait_status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        _CHILDREN.discard(pid)
        return None
    if reaped == 0:
        return None
    _CHILDREN.discard(pid)
    return wait_status


def _reap_finished() -> None:
    """Reap every wrapper of ours that has exited, so finished tasks leave no zombies behind."""
    for pid in list(_CHILDREN):
        _reap(pid)


def _kill_group(pgid: int, signum: int) -> None:
    os.killpg(pgid, signum)


# --------------------------------------------------------------------------- Executor


def _check_deadline_value(name: str, value: object) -> None:
    if value is None:
        return
    if type(value) is not int:  # bool and float are refused too
        raise ExecutorRefused("deadline.unsafe", f"{name} must be a safe integer")
    if value > MAX_SAFE_INTEGER or value < -MAX_SAFE_INTEGER:
        raise ExecutorRefused("deadline.unsafe", f"{name} must be a safe integer")
    if value < 0:
        raise ExecutorRefused("deadline.negative", f"{name} must not be negative")


def _check_name(code: str, what: str, value: object) -> str:
    if (
        type(value) is not str
        or value in ("", ".", "..")
        or "/" in value
        or "\x00" in value
        or len(value.encode("utf-8", "surrogatepass")) > 200
    ):
        raise ExecutorRefused(code, f"{what} must be a non-empty file name component")
    return value


def _validate(
    offer_id: object,
    launch_nonce: object,
    argv: object,
    env: object,
    timeout_ms: object,
    deadline_at_ms: object,
) -> tuple[str, str, list[str], dict[str, str]]:
    _check_deadline_value("timeout_ms", timeout_ms)
    _check_deadline_value("deadline_at_ms", deadline_at_ms)
    if (timeout_ms is None) != (deadline_at_ms is None):
        raise ExecutorRefused("deadline.one_sided", "timeout_ms and deadline_at_ms must be both present or both absent")
    if isinstance(argv, str | bytes) or not isinstance(argv, Sequence):
        raise ExecutorRefused("argv.invalid", "argv must be a sequence of str")
    if len(argv) == 0:
        raise ExecutorRefused("argv.empty", "argv must not be empty")
    if any(type(a) is not str or "\x00" in a for a in argv) or argv[0] == "":
        raise ExecutorRefused("argv.invalid", "argv items must be str without NUL; argv[0] non-empty")
    if not isinstance(env, Mapping):
        raise ExecutorRefused("env.invalid", "env must be a mapping of str to str")
    clean_env: dict[str, str] = {}
    for key, value in env.items():
        if (
            type(key) is not str
            or type(value) is not str
            or key == ""
            or "=" in key
            or "\x00" in key
            or "\x00" in value
        ):
            raise ExecutorRefused("env.invalid", f"bad environment entry {key!r}")
        clean_env[key] = value
    return (
        _check_name("offer_id.invalid", "offer_id", offer_id),
        _check_name("launch_nonce.invalid", "launch_nonce", launch_nonce),
        list(argv),
        clean_env,
    )


def _import_root() -> str:
    """The sys.path entries holding the `qinglong` package (not resolved: the package lives in a
    symlinked import root), for the wrapper's PYTHONPATH."""
    roots: list[str] = []
    for entry in qinglong.__path__:
        root = os.path.dirname(os.path.abspath(entry))
        if root not in roots:
            roots.append(root)
    return os.pathsep.join(roots)


async def _wait_ready(read_fd: int, timeout_s: float) -> bool | None:
    """Wait for the wrapper to write its ready byte and close the pipe: True when it reported ready,
    False when the pipe closed without it (the wrapper died first), None on timeout."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[bool] = loop.create_future()
    received = bytearray()

    def on_readable() -> None:
        try:
            data = os.read(read_fd, 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            received.extend(data)
        elif not done.done():
            done.set_result(received == b"R")

    os.set_blocking(read_fd, False)
    loop.add_reader(read_fd, on_readable)
    try:
        return await asyncio.wait_for(done, timeout_s)
    except TimeoutError:
        return None
    finally:
        loop.remove_reader(read_fd)


def _spawn_wrapper(cmd: list[str], env: dict[str, str], ready_w: int, ready_target: int) -> int:
    """Start the wrapper in a new session (its own process group): stdin/stdout/stderr on /dev/null,
    the ready pipe's write end on `ready_target`, SIGPIPE/SIGXFSZ back to their defaults (as Popen
    does). Every other descriptor of this process is close-on-exec (PEP 446)."""
    file_actions = [
        (os.POSIX_SPAWN_DUP2, ready_w, ready_target),
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    return os.posix_spawn(
        cmd[0],
        cmd,
        env,
        file_actions=file_actions,
        setsid=True,
        setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
    )


def _kill_own_child(pid: int) -> int:
    """SIGKILL the group of a wrapper we spawned and have not reaped (its pid is pinned to it) and
    reap it; its wait status."""
    with contextlib.suppress(ProcessLookupError):
        _kill_group(pid, signal.SIGKILL)
    return _wait_own_child(pid)


def _wait_own_child(pid: int) -> int:
    """Reap our wrapper, which has exited or is dying (blocks only that long)."""
    _CHILDREN.discard(pid)
    try:
        return os.waitpid(pid, 0)[1]
    except ChildProcessError:
        return 0


class Executor:
    """Spawns tasks under the runner wrapper; files under `work_dir/<offer_id>/` (0700). `stop_grace_s`
    is the wrapper's own TERM→KILL grace when its dead-man's switch fires."""

    def __init__(self, work_dir: Path, *, stop_grace_s: float = 5.0) -> None:
        self._work_dir = Path(work_dir)
        self._stop_grace_s = stop_grace_s

    @staticmethod
    def lease_path(handle_or_log: ProcessHandle | Path) -> Path:
        """The dead-man's switch file beside a launch's log."""
        log = Path(handle_or_log.log_path) if isinstance(handle_or_log, ProcessHandle) else handle_or_log
        return log.with_suffix(".lease")

    @staticmethod
    def identity_path(log: Path) -> Path:
        """The wrapper's own identity file beside a launch's log (written before the task starts)."""
        return log.with_suffix(".identity.json")

    def extend_lease(self, handle: ProcessHandle, expires_boottime_ns: int) -> None:
        """Move the wrapper's dead-man's switch to a later local expiry (atomic rename; an OSError
        leaves the old expiry in force, which stops the task early rather than late)."""
        path = self.lease_path(handle)
        if path.exists():
            write_atomically(path, str(expires_boottime_ns).encode(), durable=False)

    def paths(self, offer_id: str, launch_nonce: str) -> tuple[Path, Path]:
        """(log, status) paths of one launch."""
        offer = _check_name("offer_id.invalid", "offer_id", offer_id)
        nonce = _check_name("launch_nonce.invalid", "launch_nonce", launch_nonce)
        folder = self._work_dir / offer
        return folder / f"{nonce}.log", folder / f"{nonce}.status.json"

    async def spawn(
        self,
        *,
        offer_id: str,
        launch_nonce: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        timeout_ms: int | None,
        deadline_at_ms: int | None,
        lease_expires_boottime_ns: int | None = None,
    ) -> ProcessHandle:
        _reap_finished()
        offer, nonce, task_argv, task_env = _validate(offer_id, launch_nonce, argv, env, timeout_ms, deadline_at_ms)
        log_path, status_path = self.paths(offer, nonce)

        wrapper_env = dict(task_env)
        wrapper_env.setdefault("PATH", os.environ.get("PATH", os.defpath))
        root = _import_root()
        given = wrapper_env.get("PYTHONPATH")
        wrapper_env["PYTHONPATH"] = f"{root}{os.pathsep}{given}" if given else root
        wrapper_env.pop("QINGLONG_DEADLINE_AT_MS", None)
        if deadline_at_ms is not None:
            wrapper_env["QINGLONG_DEADLINE_AT_MS"] = str(deadline_at_ms)

        self._work_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        folder = log_path.parent
        folder.mkdir(mode=0o700, exist_ok=True)
        folder.chmod(0o700)
        if status_path.exists():
            raise ExecutorRefused("launch.duplicate", f"launch {nonce!r} of offer {offer!r} already ran")
        try:
            # The log is created exclusively: a launch nonce is spawned at most once.
            os.close(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
        except FileExistsError:
            raise ExecutorRefused(
                "launch.duplicate", f"launch {nonce!r} of offer {offer!r} was already spawned"
            ) from None

        ready_r, ready_w = os.pipe()
        ready_target = 3 if ready_w != 3 else 4  # the wrapper's end; dup2 onto itself would keep CLOEXEC
        cmd = [sys.executable, "-m", _RUNNER_MODULE, "--log", str(log_path), "--status", str(status_path)]
        cmd += ["--identity", str(self.identity_path(log_path))]
        if lease_expires_boottime_ns is not None:
            lease_path = self.lease_path(log_path)
            write_atomically(lease_path, str(lease_expires_boottime_ns).encode(), durable=False)
            cmd += ["--lease", str(lease_path), "--grace", repr(float(self._stop_grace_s))]
        cmd += ["--ready-fd", str(ready_target), "--", *task_argv]
        try:
            try:
                pid = _spawn_wrapper(cmd, wrapper_env, ready_w, ready_target)
            finally:
                os.close(ready_w)
            _CHILDREN.add(pid)
            try:
                # Our unreaped child: /proc/<pid> exists (at worst as a zombie) and the pid is ours.
                st = _read_stat(pid)
                if st is None:
                    raise RuntimeError(f"runner wrapper {pid} has no /proc entry")
                handle = ProcessHandle(
                    pid=pid,
                    pgid=pid,
                    start_time=st.start_time,
                    boot_id=boot_id(),
                    log_path=str(log_path),
                    status_path=str(status_path),
                    launch_nonce=nonce,
                )
                ready = await _wait_ready(ready_r, _READY_TIMEOUT_S)
            except BaseException:
                # No durable handle will be recorded: do not leave an untracked task running.
                _kill_own_child(pid)
                raise
        finally:
            os.close(ready_r)
        if ready is False:  # the wrapper closed the pipe without reporting ready: it has exited
            code = os.waitstatus_to_exitcode(_wait_own_child(pid))
            raise RuntimeError(f"runner wrapper exited before it was ready (exit {code})")
        return handle

    def exit_status(self, handle: ProcessHandle) -> ExitStatus | None:
        """The task's exit status from the wrapper's status file; None while the file is absent."""
        _reap_finished()
        try:
            with open(handle.status_path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        obj = json.loads(raw)
        if not isinstance(obj, dict) or set(obj) != {"exitCode", "signal"}:
            raise ValueError(f"malformed status file {handle.status_path}")
        code, signum = obj["exitCode"], obj["signal"]
        for value in (code, signum):
            if value is not None and type(value) is not int:
                raise ValueError(f"malformed status file {handle.status_path}")
        if (code is None) == (signum is None):
            raise ValueError(f"malformed status file {handle.status_path}")
        return ExitStatus(exit_code=code, signal=signum)

    def read_log(self, handle: ProcessHandle, cap: int) -> bytes:
        """The first `cap` bytes of the task's log."""
        if type(cap) is not int or cap < 0:
            raise ValueError("cap must be a non-negative int")
        chunks: list[bytes] = []
        remaining = cap
        with open(handle.log_path, "rb") as f:
            while remaining > 0:
                chunk = f.read(remaining)
                if not chunk:
                    break
                chunks.append(chunk)
                remaining -= len(chunk)
        return b"".join(chunks)


# --------------------------------------------------------------------------- LocalProcessController


def _probe(handle: ProcessHandle) -> Verification | Literal["reused"]:
    """The process-level part of verify (boot and status file aside): is the handle's group leader
    still running under the proven identity?"""
    try:
        st = _read_stat(handle.pid)
    except (OSError, ValueError):
        return "unverified"  # cannot read /proc for the pid: identity cannot be proven
    if st is None:
        return "exited"
    if st.start_time != handle.start_time:
        return "reused"  # the pid belongs to another process now: never signal the new owner
    if st.state in ("Z", "X", "x"):
        _reap(handle.pid)  # identity proven and a zombie: the pid cannot be reused until reaped
        return "exited"
    if st.pgrp != handle.pgid:
        return "unverified"  # same process, inconsistent group: do not signal any group
    return "alive"


class LocalProcessController:
    """Stops the exact local process group of a handle; never signals an unproven identity."""

    def __init__(self, *, grace_s: float = 5.0, poll_s: float = 0.05) -> None:
        if grace_s < 0 or poll_s <= 0:
            raise ValueError("grace_s must be >= 0 and poll_s > 0")
        self._grace_s = grace_s
        self._poll_s = poll_s

    def verify(self, handle: ProcessHandle) -> Verification:
        """alive: identity proven (same boot, same start time, same group, not a zombie) and running.
        exited: provably not our process running any more (other boot, status file written, gone, zombie).
        unverified: the pid now belongs to a process with another start time (ours left no status, so
        how it ended is unknown), /proc cannot be read for the pid, or the group differs."""
        try:
            if handle.boot_id != boot_id():
                return "exited"
        except OSError:
            return "unverified"
        _reap_finished()
        if os.path.exists(handle.status_path):
            return "exited"
        probe = _probe(handle)
        return "unverified" if probe == "reused" else probe

    async def stop(self, handle: ProcessHandle) -> StopOutcome:
        """Verify, then TERM the group, wait up to grace_s for the group leader to exit (re-verifying
        each poll), then KILL the group if it is still verified alive."""
        initial = self.verify(handle)
        if initial == "exited":
            return "already_exited"
        if initial == "unverified":
            return "unverified"

        outcome = self._signal(handle, signal.SIGTERM)
        if outcome is not None:
            return outcome
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._grace_s
        while True:
            state = _probe(handle)
            if state in ("exited", "reused"):  # gone while we waited (the pid may be reused already)
                return "stopped"
            if state == "unverified":
                return "unverified"
            if loop.time() >= deadline:
                break
            await asyncio.sleep(min(self._poll_s, max(0.0, deadline - loop.time())))

        # Grace over and (just above) still proven alive: KILL the group.
        outcome = self._signal(handle, signal.SIGKILL)
        if outcome is not None:
            return "stopped" if outcome == "already_exited" else outcome
        deadline = loop.time() + _KILL_WAIT_S
        while True:
            state = _probe(handle)
            if state in ("exited", "reused"):  # gone while we waited (the pid may be reused already)
                return "stopped"
            if state == "unverified" or loop.time() >= deadline:
                return "unverified"  # KILL sent but the leader's end was not observed
            await asyncio.sleep(self._poll_s)

    def _signal(self, handle: ProcessHandle, signum: int) -> StopOutcome | None:
        """Signal the group right after re-proving the leader's identity; None when sent."""
        state = _probe(handle)
        if state in ("exited", "reused"):  # never signal a pid that belongs to another process now
            return "already_exited"
        if state == "unverified":
            return "unverified"
        try:
            _kill_group(handle.pgid, signum)
        except ProcessLookupError:
            _probe(handle)  # reaps a zombie wrapper of ours
            return "already_exited"
        except PermissionError:
            return "unverified"
        return None
