"""The Executor: spawns a task under the runner wrapper (the Worker's process layer; identity.py
holds the durable handle, controller.py stops a task).

`Executor.spawn` validates the durable deadline fields (one-sided, negative or unsafe values are
refused; nothing is spawned) but never arms a timer: the control plane is the timeout authority. It
starts `python -I -m qinglong.worker.runner` in a new session (isolated: neither the Worker's
PYTHONPATH nor its user site reach the wrapper or the task; the task's environment is its plan's
`env` and the values of its `secretEnv` (`secret_env`; a variable the plan's `env` sets is refused), PATH when
the plan gives none, QINGLONG_DEADLINE_AT_MS, and LC_CTYPE=C.UTF-8 from Python's locale coercion in the
wrapper when the plan sets no locale) and returns once the wrapper has
installed its signal handlers and started the task. The launch's files live under
`work_dir/<offer_id>/` (0700), named after the launch nonce: `.log` (the task's stdout spool, created
exclusively here: a nonce is launched at most once), `.err` (its stderr and the wrapper's own lines),
each capped on disk by `spool_bytes` (head, segment: spool.py; worker.toml `output_head_kib`, `output_tail_kib`),
`.status.json`, `.identity.json` and `.lease`. `output_size` and `read_output` read a stream's spool
(stdout or stderr) for the coordinator, which ships it.

Where and as whom (a `TaskPolicy`, from worker.toml): a task runs in its Run's own directory
`work_dir/tasks/<run_id>/` (0700, owned by the task's user; `work_dir` and `tasks/` are 0711, so a
task user can reach its own directory but list nothing), or in the plan's `cwd`: a relative one
inside that directory (created), an absolute one only when `allow_absolute_cwd` is set (it must
exist). It runs as the Worker's own user and group unless the plan names a `user` on `run_as` and/or
a `group` on `run_as_groups`; switching needs root or CAP_SETUID/CAP_SETGID. A task that would run
as root is refused unless `allow_root_tasks` is set. Every refusal (`plan.*`, `secret_env_refused`) happens
before any file or process is created.
A bundle (`bundle`, the archive's bytes; unpack.py) is unpacked into the Run's own directory once it exists, as
the task's user, before the secret files: one that breaks a rule is refused with its `bundle.*` code and
leaves nothing new behind.
Secret files (`secret_files`, delivery.py) are made in the Run's own directory once it exists, owned by the
task's user and group, their bytes in `secret_store(nonce)` on a tmpfs when the Executor has one, before the
launch's log: a path that would leave the directory or follow a symlink is
refused (`secret_file_refused`) with nothing left behind, and a spawn that fails after they were made removes
them before it raises.
The lease file is the wrapper's dead-man's switch (see runner.py): spawn writes the local Lease
expiry into it and `extend_lease` rewrites it after every persisted renewal.

Touches: `work_dir`, the secret store (a folder on a tmpfs), child processes. Standard library only; nothing
happens at import or construction.
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import json
import os
import pwd
import re
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final, Literal

from qinglong.wire.bundle import BundleError
from qinglong.worker import spool
from qinglong.worker.delivery import (
    SECRET_ENV_REFUSED,
    SECRET_FILE_REFUSED,
    FileDelivery,
    SecretFile,
    SecretFileRefused,
    remove_files,
    write_files,
)
from qinglong.worker.identity import CHILDREN, ExitStatus, ProcessHandle, boot_id, read_stat, reap_finished
from qinglong.worker.runner import stderr_path, write_atomically
from qinglong.worker.unpack import unpack

MAX_SAFE_INTEGER: Final = 2**53 - 1
DEADLINE_VARIABLE: Final = "QINGLONG_DEADLINE_AT_MS"
_VARIABLE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RUNNER_MODULE: Final = "qinglong.worker.runner"
# How long spawn() waits for the wrapper to report it is ready (handlers installed, task started).
# Past it the wrapper is still running under a known identity, so the handle is returned anyway.
_READY_TIMEOUT_S: Final = 30.0


class ExecutorRefused(Exception):
    """The Executor refused a spawn request; nothing was spawned and no file was created.

    `code` is stable: deadline.one_sided, deadline.negative, deadline.unsafe, argv.empty, env.invalid,
    and (also) argv.invalid, offer_id.invalid, launch_nonce.invalid, launch.duplicate; the plan's
    requests: plan.user_not_allowed, plan.user_unknown, plan.group_not_allowed, plan.group_unknown,
    plan.switch_not_permitted, plan.root_not_allowed, plan.cwd_absolute, plan.cwd_outside,
    plan.cwd_missing; the plan's secrets: secret_env_refused, secret_file_refused. The message never holds a
    secret's value.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


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


def _with_secret_env(env: dict[str, str], secret_env: Mapping[str, bytes] | None) -> dict[str, str]:
    """The task's environment with its secret variables added: each a free variable name (not in the plan's env,
    not QINGLONG_DEADLINE_AT_MS) whose value holds no NUL byte. The bytes reach the task unchanged (a value that
    is not UTF-8 travels as surrogate escapes, which the spawn encodes back)."""
    if not secret_env:
        return env
    merged = dict(env)
    for name, value in secret_env.items():
        if type(name) is not str or not _VARIABLE.fullmatch(name) or name in merged or name == DEADLINE_VARIABLE:
            raise ExecutorRefused(SECRET_ENV_REFUSED, f"secret variable {name!r} is not a free variable name")
        if type(value) is not bytes or b"\0" in value:
            raise ExecutorRefused(SECRET_ENV_REFUSED, f"secret variable {name}: its value cannot be in an environment")
        merged[name] = os.fsdecode(value)
    return merged


@dataclass(frozen=True)
class TaskPolicy:
    """What a plan may ask of this Worker (worker.toml: run_as, run_as_groups, allow_absolute_cwd,
    allow_root_tasks). The default: no switch, no absolute cwd, never a task as root."""

    run_as: frozenset[str] = frozenset()
    run_as_groups: frozenset[str] = frozenset()
    allow_absolute_cwd: bool = False
    allow_root_tasks: bool = False


@dataclass(frozen=True)
class _Placement:
    uid: int | None  # None: the Worker's own
    gid: int | None
    extra_groups: tuple[int, ...] | None
    owner: tuple[int, int]  # who owns the Run's directory
    cwd: PurePosixPath | None  # relative to the Run's directory, or absolute; None: the directory itself


_CAP_SETGID: Final = 6
_CAP_SETUID: Final = 7


def _can_switch() -> bool:
    """Root, or both CAP_SETUID and CAP_SETGID in the effective set."""
    if os.geteuid() == 0:
        return True
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    caps = int(line.split()[1], 16)
                    return bool(caps >> _CAP_SETUID & 1 and caps >> _CAP_SETGID & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def _place(policy: TaskPolicy, cwd: str | None, user: str | None, group: str | None) -> _Placement:
    """Decide where and as whom a task runs, or refuse (nothing created yet)."""
    uid = gid = None
    extra: tuple[int, ...] | None = None
    if user is not None:
        if user not in policy.run_as:
            raise ExecutorRefused("plan.user_not_allowed", f"user {user!r} is not on this Worker's run_as list")
        try:
            pw = pwd.getpwnam(user)
        except KeyError:
            raise ExecutorRefused("plan.user_unknown", f"no user {user!r} on this host") from None
        uid, gid = pw.pw_uid, pw.pw_gid
        extra = tuple(os.getgrouplist(user, pw.pw_gid)) if group is None else ()
    if group is not None:
        if group not in policy.run_as_groups:
            raise ExecutorRefused(
                "plan.group_not_allowed", f"group {group!r} is not on this Worker's run_as_groups list"
            )
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            raise ExecutorRefused("plan.group_unknown", f"no group {group!r} on this host") from None
        extra = () if extra is None else (gid,)
    effective_uid = os.geteuid() if uid is None else uid
    effective_gid = os.getegid() if gid is None else gid
    if (effective_uid, effective_gid) != (os.geteuid(), os.getegid()) and not _can_switch():
        raise ExecutorRefused("plan.switch_not_permitted", "this Worker may not switch users or groups")
    if effective_uid == 0 and not policy.allow_root_tasks:
        why = "the plan names no user" if user is None else f"the plan's user {user!r} is root"
        raise ExecutorRefused(
            "plan.root_not_allowed",
            f"{why} and this Worker does not run tasks as root: set the plan's user to one on run_as "
            "(or allow_root_tasks = true in worker.toml)",
        )
    path: PurePosixPath | None = None
    if cwd is not None:
        if type(cwd) is not str or cwd == "" or "\x00" in cwd:
            raise ExecutorRefused("plan.cwd_outside", "cwd must be a non-empty path")
        path = PurePosixPath(cwd)
        if path.is_absolute():
            if not policy.allow_absolute_cwd:
                raise ExecutorRefused("plan.cwd_absolute", "this Worker does not allow an absolute cwd")
            if not os.path.isdir(path):
                raise ExecutorRefused("plan.cwd_missing", f"cwd {cwd!r} is not a directory")
        elif ".." in path.parts:
            raise ExecutorRefused("plan.cwd_outside", "a relative cwd stays inside the Run's directory")
    return _Placement(uid, gid, extra, (effective_uid, effective_gid), path)


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


def _create_log(offer: str, nonce: str, log_path: Path, status_path: Path) -> None:
    """The launch's folder (0700) and its log, created exclusively: a launch nonce is spawned at most once."""
    folder = log_path.parent
    folder.mkdir(mode=0o700, exist_ok=True)
    folder.chmod(0o700)
    if status_path.exists():
        raise ExecutorRefused("launch.duplicate", f"launch {nonce!r} of offer {offer!r} already ran")
    try:
        os.close(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
    except FileExistsError:
        raise ExecutorRefused("launch.duplicate", f"launch {nonce!r} of offer {offer!r} was already spawned") from None


def _kill_own_child(pid: int) -> int:
    """SIGKILL the group of a wrapper we spawned and have not reaped (its pid is pinned to it) and
    reap it; its wait status."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    return _wait_own_child(pid)


def _wait_own_child(pid: int) -> int:
    """Reap our wrapper, which has exited or is dying (blocks only that long)."""
    CHILDREN.discard(pid)
    try:
        return os.waitpid(pid, 0)[1]
    except ChildProcessError:
        return 0


class Executor:
    """Spawns tasks under the runner wrapper; files under `work_dir/<offer_id>/` (0700). `stop_grace_s`
    is the wrapper's own TERM→KILL grace when its dead-man's switch fires."""

    def __init__(
        self,
        work_dir: Path,
        *,
        stop_grace_s: float = 5.0,
        policy: TaskPolicy | None = None,
        store_base: Path | None = None,
        spool_bytes: tuple[int, int] = (spool.HEAD_BYTES, spool.TAIL_BYTES),
    ) -> None:
        self._work_dir = Path(work_dir)
        self._spool_bytes = spool_bytes
        self._stop_grace_s = stop_grace_s
        self._policy = policy or TaskPolicy()
        self._store_base = store_base

    def secret_store(self, launch_nonce: str) -> Path | None:
        """The folder on a tmpfs that holds a launch's secret files (None: they are in the Run's directory)."""
        if self._store_base is None:
            return None
        return self._store_base / _check_name("launch_nonce.invalid", "launch_nonce", launch_nonce)

    @property
    def work_dir(self) -> Path:
        return self._work_dir

    def run_dir(self, run_id: str) -> Path:
        """The Run's own directory (every Attempt of the Run on this Worker shares it)."""
        return self._work_dir / "tasks" / _check_name("run_id.invalid", "run_id", run_id)

    def _prepare_cwd(self, run_id: str, placement: _Placement) -> Path:
        """Create the Run's directory (and a relative cwd in it), owned by the task's user."""
        self._work_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        tasks = self._work_dir / "tasks"
        tasks.mkdir(mode=0o711, exist_ok=True)
        for folder in (self._work_dir, tasks):  # traversable by the task's user, listable by nobody
            folder.chmod(0o711)
        run_dir = self.run_dir(run_id)
        run_dir.mkdir(mode=0o700, exist_ok=True)
        if run_dir.is_symlink() or not run_dir.is_dir():
            raise ExecutorRefused("plan.cwd_outside", "the Run's directory is not a directory")
        uid, gid = placement.owner
        if (uid, gid) != (os.geteuid(), os.getegid()):
            os.chown(run_dir, uid, gid, follow_symlinks=False)
        if placement.cwd is None:
            return run_dir
        if placement.cwd.is_absolute():
            return Path(placement.cwd)
        target = run_dir / placement.cwd
        base = run_dir.resolve()
        if not target.resolve().is_relative_to(base):  # a symlink an earlier Attempt left: create nothing
            raise ExecutorRefused("plan.cwd_outside", "cwd leaves the Run's directory")
        created: list[Path] = []
        probe = target
        while not probe.exists() and probe != run_dir:
            created.append(probe)
            probe = probe.parent
        target.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not target.resolve().is_relative_to(base) or not target.is_dir():  # changed meanwhile
            raise ExecutorRefused("plan.cwd_outside", "cwd leaves the Run's directory")
        if (uid, gid) != (os.geteuid(), os.getegid()):
            for path in created:
                os.chown(path, uid, gid, follow_symlinks=False)
        return target

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
        run_id: str | None = None,
        cwd: str | None = None,
        user: str | None = None,
        group: str | None = None,
        secret_env: Mapping[str, bytes] | None = None,
        secret_files: FileDelivery | None = None,
        bundle: bytes | None = None,
    ) -> ProcessHandle:
        reap_finished()
        offer, nonce, task_argv, task_env = _validate(offer_id, launch_nonce, argv, env, timeout_ms, deadline_at_ms)
        log_path, status_path = self.paths(offer, nonce)
        placement = _place(self._policy, cwd, user, group)
        run_key = _check_name("run_id.invalid", "run_id", offer if run_id is None else run_id)
        task_env = _with_secret_env(task_env, secret_env)

        # The task's environment is its plan's: the wrapper runs isolated (-I) and imports itself from
        # the interpreter's own site-packages, so nothing of the Worker's Python path reaches the task.
        wrapper_env = dict(task_env)
        wrapper_env.setdefault("PATH", os.environ.get("PATH", os.defpath))
        wrapper_env.pop(DEADLINE_VARIABLE, None)
        if deadline_at_ms is not None:
            wrapper_env[DEADLINE_VARIABLE] = str(deadline_at_ms)

        task_cwd = self._prepare_cwd(run_key, placement)
        if bundle is not None:
            owner = None if placement.owner == (os.geteuid(), os.getegid()) else placement.owner
            try:
                unpack(bundle, self.run_dir(run_key), owner)
            except BundleError as refused:
                raise ExecutorRefused(refused.code, str(refused)) from None
        made: tuple[SecretFile, ...] = ()
        if secret_files is not None and secret_files.files:
            owner = None if placement.owner == (os.geteuid(), os.getegid()) else placement.owner
            try:
                made = write_files(self.run_dir(run_key), secret_files, owner, self.secret_store(nonce))
            except SecretFileRefused as refused:
                raise ExecutorRefused(SECRET_FILE_REFUSED, str(refused)) from None
        try:
            return await self._start(offer, nonce, log_path, status_path, placement, task_cwd, task_argv,
                                     wrapper_env, lease_expires_boottime_ns)  # fmt: skip
        except BaseException:
            # No task runs (refused, never spawned, or its wrapper killed): its secret files go with it.
            store = self.secret_store(nonce)
            remove_files(str(self.run_dir(run_key)), made, None if store is None else str(store))
            raise

    async def _start(
        self,
        offer: str,
        nonce: str,
        log_path: Path,
        status_path: Path,
        placement: _Placement,
        task_cwd: Path,
        task_argv: list[str],
        wrapper_env: dict[str, str],
        lease_expires_boottime_ns: int | None,
    ) -> ProcessHandle:
        """Create the launch's log and start the wrapper; a raise means no task runs."""
        _create_log(offer, nonce, log_path, status_path)
        ready_r, ready_w = os.pipe()
        ready_target = 3 if ready_w != 3 else 4  # the wrapper's end; dup2 onto itself would keep CLOEXEC
        cmd = [sys.executable, "-I", "-m", _RUNNER_MODULE, "--log", str(log_path), "--status", str(status_path)]
        cmd += ["--identity", str(self.identity_path(log_path)), "--cwd", str(task_cwd)]
        cmd += ["--spool", "{},{}".format(*self._spool_bytes)]
        if placement.uid is not None:
            cmd += ["--uid", str(placement.uid)]
        if placement.gid is not None:
            cmd += ["--gid", str(placement.gid)]
        if placement.extra_groups is not None:
            cmd += ["--groups", ",".join(str(g) for g in placement.extra_groups)]
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
            CHILDREN.add(pid)
            try:
                # Our unreaped child: /proc/<pid> exists (at worst as a zombie) and the pid is ours.
                st = read_stat(pid)
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
        reap_finished()
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

    @staticmethod
    def output_path(handle: ProcessHandle, stream: Literal["stdout", "stderr"]) -> Path:
        """The file a launch's stream is appended to: stdout is the log, stderr its `.err` sibling."""
        return Path(handle.log_path if stream == "stdout" else stderr_path(handle.log_path))

    def output_size(self, handle: ProcessHandle, stream: Literal["stdout", "stderr"]) -> int:
        """The bytes written to a stream so far, dropped ones included (0 before its spool exists)."""
        return spool.size(str(self.output_path(handle, stream)))

    def read_output(
        self, handle: ProcessHandle, stream: Literal["stdout", "stderr"], offset: int, n: int
    ) -> tuple[int, bytes]:
        """Up to `n` bytes of a stream from the first byte its spool holds at or after `offset`: (where they start,
        the bytes); no bytes at its end (or before its spool exists)."""
        return spool.read(str(self.output_path(handle, stream)), offset, n)
