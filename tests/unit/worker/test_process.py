"""The Worker's local process layer against real processes and signals (no mocks): the Executor and
its runner wrapper, the durable handle, and the LocalProcessController's identity rules, each
"never signalled" claim proven by a victim process that survives.

Every process a test starts carries a marker in its environment; a fixture fails the test if any
marked process (other than a zombie) is still running at teardown, and kills it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Literal

import pytest

from qinglong.worker import runner, spool
from qinglong.worker.controller import LocalProcessController
from qinglong.worker.executor import Executor, ExecutorRefused, TaskPolicy
from qinglong.worker.identity import ExitStatus, ProcessHandle, boot_id, boottime_ns, process_start_time
from qinglong.worker.launch import recover_launch

MARK_VAR = "QL_PROCESS_TEST_MARK"
# These tests may run as root (this machine does): a root Worker runs tasks as root only when told to.
AS_ROOT_TOO = TaskPolicy(allow_root_tasks=True)


# ---------------------------------------------------------- /proc and file helpers (independent of the code under test)


def _stat_fields(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/<pid>/stat, or None when the process is gone."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return data[data.rindex(b")") + 2 :].decode().split()


def running(pid: int) -> bool:
    """The process exists and is not a zombie."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def children_of(pid: int) -> list[int]:
    out = []
    for p in _all_pids():
        fields = _stat_fields(p)
        if fields is not None and int(fields[1]) == pid and fields[0] not in ("Z", "X"):
            out.append(p)
    return out


def group_members(pgid: int) -> list[int]:
    out = []
    for p in _all_pids():
        fields = _stat_fields(p)
        if fields is not None and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            out.append(p)
    return out


def comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().rstrip("\n")


def marked_pids(mark: str) -> list[int]:
    needle = f"{MARK_VAR}={mark}".encode()
    out = []
    for p in _all_pids():
        try:
            environ = Path(f"/proc/{p}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and running(p):
            out.append(p)
    return out


def mode(path: str | Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def listdir(path: str | Path) -> list[str]:
    return sorted(os.listdir(path))


def read_json(path: str | Path) -> object:
    return json.loads(Path(path).read_bytes())


def write_text(path: str | Path, text: str) -> None:
    Path(path).write_text(text)


def wait_until(pred: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


async def await_until(pred: Callable[[], bool], within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while not pred():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.02)
    return True


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(autouse=True)
def mark(tmp_path: Path) -> Iterator[str]:
    """A per-test marker; at teardown no marked process may still be running."""
    value = f"{tmp_path}-{uuid.uuid4().hex}"
    yield value
    deadline = time.monotonic() + 3.0
    left = marked_pids(value)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = marked_pids(value)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left behind: {[(p, comm(p)) for p in left if running(p)]}"


@pytest.fixture
def env(mark: str) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], MARK_VAR: mark}


@pytest.fixture
def executor(tmp_path: Path) -> Executor:
    return Executor(tmp_path / "work", policy=AS_ROOT_TOO)


Victim = Callable[..., "subprocess.Popen[bytes]"]


@pytest.fixture
def victim(env: dict[str, str]) -> Iterator[Victim]:
    """Start unrelated processes (`sleep 30`, by default in their own session); killed at teardown."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(argv: list[str] | None = None, *, new_session: bool = True) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(argv or ["sleep", "30"], env=env, start_new_session=new_session)
        procs.append(proc)
        assert wait_until(lambda: process_start_time(proc.pid) is not None)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def handle_for(proc: subprocess.Popen[bytes], tmp_path: Path) -> ProcessHandle:
    """A correct handle for a plain process started in its own session."""
    start_time = process_start_time(proc.pid)
    assert start_time is not None
    return ProcessHandle(
        pid=proc.pid,
        pgid=os.getpgid(proc.pid),
        start_time=start_time,
        boot_id=boot_id(),
        log_path=str(tmp_path / "victim.log"),
        status_path=str(tmp_path / "victim.status.json"),
        launch_nonce="victim",
    )


async def spawn(
    executor: Executor,
    argv: list[str],
    env: dict[str, str],
    *,
    timeout_ms: int | None = None,
    deadline_at_ms: int | None = None,
) -> ProcessHandle:
    return await executor.spawn(
        offer_id="offer-1",
        launch_nonce=uuid.uuid4().hex,
        argv=argv,
        env=env,
        timeout_ms=timeout_ms,
        deadline_at_ms=deadline_at_ms,
    )


def output(executor: Executor, handle: ProcessHandle, stream: Literal["stdout", "stderr"] = "stdout") -> bytes:
    """All of a stream's file, through the Executor."""
    start, data = executor.read_output(handle, stream, 0, executor.output_size(handle, stream))
    assert start == 0
    return data


async def wait_status(executor: Executor, handle: ProcessHandle) -> ExitStatus:
    assert await await_until(lambda: executor.exit_status(handle) is not None, within=10.0)
    status = executor.exit_status(handle)
    assert status is not None
    return status


# --------------------------------------------------------------------------- Executor


async def test_spawn_records_exit_code_and_log(executor: Executor, env: dict[str, str], tmp_path: Path) -> None:
    handle = await spawn(executor, ["sh", "-c", "echo hi; echo oops >&2; exit 3"], env)
    assert handle.pgid == handle.pid
    assert handle.boot_id == boot_id()
    assert handle.start_time == process_start_time(handle.pid) or not running(handle.pid)

    assert await wait_status(executor, handle) == ExitStatus(exit_code=3, signal=None)
    assert read_json(handle.status_path) == {"exitCode": 3, "signal": None}
    # stdout and stderr stay apart; a read takes n bytes at an offset, fewer at the end
    assert (executor.output_size(handle, "stdout"), executor.output_size(handle, "stderr")) == (3, 5)
    assert (output(executor, handle), output(executor, handle, "stderr")) == (b"hi\n", b"oops\n")
    assert executor.read_output(handle, "stdout", 1, 1) == (1, b"i")
    assert executor.read_output(handle, "stderr", 2, 1 << 20) == (2, b"ps\n")
    assert executor.read_output(handle, "stdout", 0, 0) == (0, b"")
    assert executor.read_output(handle, "stdout", 3, 9) == (3, b"")

    folder = tmp_path / "work" / "offer-1"
    assert Path(handle.log_path).parent == folder == Path(handle.status_path).parent
    assert mode(folder) == 0o700
    err = executor.output_path(handle, "stderr")
    assert err == folder / f"{handle.launch_nonce}.err" and executor.output_path(handle, "stdout") == Path(
        handle.log_path
    )
    assert mode(handle.log_path) == mode(str(err)) == 0o600
    assert mode(handle.status_path) == 0o600
    # no temporary status file left behind
    identity = executor.identity_path(Path(handle.log_path))
    names = [Path(handle.log_path).name, err.name, Path(handle.status_path).name, identity.name]
    assert listdir(folder) == sorted(names)
    assert read_json(str(identity)) == {"pid": handle.pid, "startTime": handle.start_time, "bootId": handle.boot_id}
    assert mode(str(identity)) == 0o600
    assert await await_until(lambda: LocalProcessController().verify(handle) == "exited")


async def test_task_gets_no_stray_descriptors_and_null_stdin(
    executor: Executor, env: dict[str, str], tmp_path: Path
) -> None:
    stray = os.open(tmp_path / "stray", os.O_WRONLY | os.O_CREAT, 0o600)
    os.set_inheritable(stray, True)  # a descriptor the Worker leaked by mistake
    try:
        handle = await spawn(executor, ["sh", "-c", "sleep 0.2; ls /proc/$$/fd; readlink /proc/$$/fd/0; cat"], env)
        assert str(stray) not in listdir(f"/proc/{handle.pid}/fd")  # the wrapper closed it too
    finally:
        os.close(stray)
    assert await wait_status(executor, handle) == ExitStatus(exit_code=0, signal=None)
    assert output(executor, handle) == b"0\n1\n2\n/dev/null\n"
    for offset, n in ((-1, 1), (0, -1)):
        with pytest.raises(ValueError):
            executor.read_output(handle, "stdout", offset, n)


def test_a_stream_without_its_file_is_empty(executor: Executor, tmp_path: Path) -> None:
    """A launch that never got as far as its files (or one made before stderr had its own file)."""
    handle = ProcessHandle(
        pid=10, pgid=10, start_time=1, boot_id=boot_id(), log_path=str(tmp_path / "n.log"),
        status_path=str(tmp_path / "n.status.json"), launch_nonce="n",
    )  # fmt: skip
    for stream in ("stdout", "stderr"):
        assert executor.output_size(handle, stream) == 0
        assert executor.read_output(handle, stream, 0, 10) == (0, b"")


async def test_exit_status_is_none_while_running(executor: Executor, env: dict[str, str]) -> None:
    handle = await spawn(executor, ["sleep", "1"], env)
    assert executor.exit_status(handle) is None
    assert LocalProcessController().verify(handle) == "alive"
    assert await wait_status(executor, handle) == ExitStatus(exit_code=0, signal=None)
    assert LocalProcessController().verify(handle) == "exited"


async def test_deadline_is_information_not_a_timer(executor: Executor, env: dict[str, str]) -> None:
    # A 1 ms timeout whose deadline is long past: the task still runs to its end (no local timer).
    handle = await spawn(
        executor,
        ["sh", "-c", 'sleep 0.3; echo "$QINGLONG_DEADLINE_AT_MS"'],
        env,
        timeout_ms=1,
        deadline_at_ms=1,
    )
    assert await wait_status(executor, handle) == ExitStatus(exit_code=0, signal=None)
    assert output(executor, handle) == b"1\n"

    no_deadline = await spawn(executor, ["sh", "-c", 'echo "[${QINGLONG_DEADLINE_AT_MS-unset}]"'], env)
    assert await wait_status(executor, no_deadline) == ExitStatus(exit_code=0, signal=None)
    assert output(executor, no_deadline) == b"[unset]\n"


async def test_safe_integer_bounds_are_accepted(executor: Executor, env: dict[str, str]) -> None:
    handle = await spawn(executor, ["true"], env, timeout_ms=0, deadline_at_ms=2**53 - 1)
    assert await wait_status(executor, handle) == ExitStatus(exit_code=0, signal=None)


async def test_path_comes_from_the_worker_when_not_given(executor: Executor, mark: str) -> None:
    handle = await spawn(executor, ["sh", "-c", 'echo "$PATH"'], {MARK_VAR: mark})
    assert await wait_status(executor, handle) == ExitStatus(exit_code=0, signal=None)
    assert output(executor, handle) == os.environ["PATH"].encode() + b"\n"


@pytest.mark.parametrize(
    ("timeout_ms", "deadline_at_ms", "argv", "bad_env", "code"),
    [
        (1000, None, ["true"], None, "deadline.one_sided"),
        (None, 5, ["true"], None, "deadline.one_sided"),
        (-1, 5, ["true"], None, "deadline.negative"),
        (5, -1, ["true"], None, "deadline.negative"),
        (2**53, 5, ["true"], None, "deadline.unsafe"),
        (5, 2**53, ["true"], None, "deadline.unsafe"),
        (True, 5, ["true"], None, "deadline.unsafe"),
        (5, False, ["true"], None, "deadline.unsafe"),
        (1.0, 5, ["true"], None, "deadline.unsafe"),
        (5, "5", ["true"], None, "deadline.unsafe"),
        (None, None, [], None, "argv.empty"),
        (None, None, ["true"], {"A=B": "x"}, "env.invalid"),
        (None, None, ["true"], {"A\0": "x"}, "env.invalid"),
        (None, None, ["true"], {"A": "x\0y"}, "env.invalid"),
        (None, None, ["true"], {"A": 1}, "env.invalid"),
        (None, None, ["true"], {1: "x"}, "env.invalid"),
        (None, None, ["true"], {"": "x"}, "env.invalid"),
    ],
)
async def test_refusals_spawn_nothing(
    executor: Executor,
    env: dict[str, str],
    mark: str,
    tmp_path: Path,
    timeout_ms: object,
    deadline_at_ms: object,
    argv: list[str],
    bad_env: dict[object, object] | None,
    code: str,
) -> None:
    children_before = children_of(os.getpid())
    with pytest.raises(ExecutorRefused) as refused:
        await executor.spawn(
            offer_id="offer-1",
            launch_nonce="n1",
            argv=argv,
            env={**env, **bad_env} if bad_env is not None else env,  # type: ignore[dict-item]
            timeout_ms=timeout_ms,  # type: ignore[arg-type]
            deadline_at_ms=deadline_at_ms,  # type: ignore[arg-type]
        )
    assert refused.value.code == code
    assert not (tmp_path / "work").exists()  # no folder, log or status file
    assert children_of(os.getpid()) == children_before
    assert marked_pids(mark) == []


@pytest.mark.parametrize(
    ("offer_id", "nonce", "argv", "code"),
    [
        ("offer-1", "n1", "true", "argv.invalid"),
        ("offer-1", "n1", ["true", 1], "argv.invalid"),
        ("offer-1", "n1", ["tr\0ue"], "argv.invalid"),
        ("../x", "n1", ["true"], "offer_id.invalid"),
        ("..", "n1", ["true"], "offer_id.invalid"),
        ("", "n1", ["true"], "offer_id.invalid"),
        ("offer-1", "a/b", ["true"], "launch_nonce.invalid"),
    ],
)
async def test_further_refusals(
    executor: Executor, env: dict[str, str], tmp_path: Path, offer_id: str, nonce: str, argv: object, code: str
) -> None:
    with pytest.raises(ExecutorRefused) as refused:
        await executor.spawn(
            offer_id=offer_id,
            launch_nonce=nonce,
            argv=argv,  # type: ignore[arg-type]
            env=env,
            timeout_ms=None,
            deadline_at_ms=None,
        )
    assert refused.value.code == code
    assert not (tmp_path / "work").exists()


async def test_a_launch_nonce_is_spawned_once(executor: Executor, env: dict[str, str]) -> None:
    kwargs: dict[str, object] = {"offer_id": "offer-1", "launch_nonce": "n1", "env": env}
    handle = await executor.spawn(argv=["true"], timeout_ms=None, deadline_at_ms=None, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ExecutorRefused) as refused:
        await executor.spawn(argv=["true"], timeout_ms=None, deadline_at_ms=None, **kwargs)  # type: ignore[arg-type]
    assert refused.value.code == "launch.duplicate"
    assert await wait_status(executor, handle) == ExitStatus(exit_code=0, signal=None)
    with pytest.raises(ExecutorRefused) as refused:
        await executor.spawn(argv=["true"], timeout_ms=None, deadline_at_ms=None, **kwargs)  # type: ignore[arg-type]
    assert refused.value.code == "launch.duplicate"


async def test_start_failures_are_recorded_as_127_and_126(
    executor: Executor, env: dict[str, str], tmp_path: Path
) -> None:
    missing = await spawn(executor, [str(tmp_path / "no-such-program")], env)
    assert await wait_status(executor, missing) == ExitStatus(exit_code=127, signal=None)
    line = output(executor, missing, "stderr")
    assert line.startswith(b"qinglong-runner: cannot execute") and line.count(b"\n") == 1
    assert output(executor, missing) == b""  # the wrapper's own lines are not the task's stdout

    not_executable = tmp_path / "script.sh"
    not_executable.write_text("#!/bin/sh\necho never\n")
    not_executable.chmod(0o600)
    denied = await spawn(executor, [str(not_executable)], env)
    assert await wait_status(executor, denied) == ExitStatus(exit_code=126, signal=None)
    assert output(executor, denied, "stderr").startswith(b"qinglong-runner: cannot execute")


async def test_cancelled_spawn_leaves_no_process(executor: Executor, env: dict[str, str]) -> None:
    task = asyncio.create_task(spawn(executor, ["sleep", "60"], env))
    await asyncio.sleep(0)  # the wrapper is started; spawn now waits for it to report ready
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # the autouse fixture proves that neither the wrapper nor a task is left running


# --------------------------------------------------------------------------- the runner wrapper itself


def run_runner(tmp_path: Path, env: dict[str, str], *args: str) -> tuple[int, Path, Path]:
    log, status = tmp_path / "r.log", tmp_path / "r.status.json"
    proc = subprocess.run(
        [sys.executable, "-m", "qinglong.worker.runner", "--log", str(log), "--status", str(status), *args],
        env={**os.environ, **env},
        capture_output=True,
        timeout=20,
        check=False,
    )
    return proc.returncode, log, status


def test_runner_exit_codes_and_status(tmp_path: Path, env: dict[str, str]) -> None:
    code, log, status = run_runner(tmp_path, env, "--", "sh", "-c", "echo out; echo err >&2; exit 7")
    assert code == 7
    assert json.loads(status.read_bytes()) == {"exitCode": 7, "signal": None}
    err = tmp_path / "r.err"  # stderr: beside LOG, named after it
    assert (log.read_bytes(), err.read_bytes()) == (b"out\n", b"err\n")

    status.unlink()
    code, log, status = run_runner(tmp_path, env, "--", "sh", "-c", "echo again; kill -TERM $$")
    assert code == 128 + signal.SIGTERM
    assert json.loads(status.read_bytes()) == {"exitCode": None, "signal": signal.SIGTERM}
    assert (log.read_bytes(), err.read_bytes()) == (b"out\nagain\n", b"err\n")  # appended
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("r.")) == ["r.err", "r.log", "r.status.json"]


def test_runner_caps_each_stream_on_disk_and_keeps_its_head_and_tail(tmp_path: Path, env: dict[str, str]) -> None:
    """4 MiB on each stream, with a cap of 64 KiB head + 2 x 32 KiB: the disk never holds more than the cap per
    stream (sampled while the task writes), and what is kept is the first and the last bytes."""
    script = (
        "import os, sys\n"
        "for i in range(65536):\n"
        "    line = b'%08d ' % i + b'x' * 54 + b'\\n'\n"
        "    os.write(1, line); os.write(2, line)\n"
    )
    log, status = tmp_path / "r.log", tmp_path / "r.status.json"
    cap = 64 * 1024 + 2 * 32 * 1024
    proc = subprocess.Popen(
        [sys.executable, "-m", "qinglong.worker.runner", "--log", str(log), "--status", str(status),
         "--spool", f"{64 * 1024},{32 * 1024}", "--", sys.executable, "-c", script],
        env={**os.environ, **env},
    )  # fmt: skip
    peak = 0
    while proc.poll() is None:
        for name in ("r.log", "r.err"):
            held = 0
            for f in tmp_path.iterdir():
                if f.name.startswith(name):
                    with contextlib.suppress(FileNotFoundError):
                        held += f.stat().st_size
            peak = max(peak, held)
        time.sleep(0.005)
    assert proc.wait() == 0 and 0 < peak <= cap
    lines = [b"%08d " % i + b"x" * 54 + b"\n" for i in range(65536)]
    whole = b"".join(lines)
    for path in (log, tmp_path / "r.err"):
        assert spool.size(str(path)) == len(whole) == 4 * 2**20
        assert spool.read(str(path), 0, 2**20) == (0, whole[: 64 * 1024])
        start, tail = spool.read(str(path), 64 * 1024, 2**20)
        assert start >= len(whole) - 2 * 32 * 1024 and tail == whole[start : start + len(tail)]


def test_a_straggler_holding_the_pipes_does_not_hold_the_end(tmp_path: Path, env: dict[str, str]) -> None:
    """The task ends while a process it left behind still holds its stdout: the wrapper takes what was written
    and records the end (before, the straggler's output had no end; now it gets EPIPE if it writes again)."""
    started, pid = time.monotonic(), tmp_path / "straggler.pid"
    try:
        code, log, status = run_runner(tmp_path, env, "--", "sh", "-c", f"sleep 30 & echo $! > {pid}; echo done")
    finally:
        os.kill(int(pid.read_text()), signal.SIGKILL)
    assert (code, log.read_bytes(), json.loads(status.read_bytes())) == (0, b"done\n", {"exitCode": 0, "signal": None})
    assert time.monotonic() - started < 15


def test_runner_usage_errors_write_no_status(tmp_path: Path, env: dict[str, str]) -> None:
    spools = (("--spool", s, "--", "true") for s in ("1", "1,0", "a,1", "1,-1", "-1,1", "1,²"))
    for args in (("sh", "-c", "true"), ("--",), ("--bogus", "x", "--", "true"), *spools):
        code, _, status = run_runner(tmp_path, env, *args)
        assert code == 2
        assert not status.exists()
    # a LOG whose stderr file would be itself
    status = tmp_path / "s.json"
    proc = subprocess.run(
        [sys.executable, "-m", "qinglong.worker.runner", "--log", str(tmp_path / "x.err"), "--status", str(status),
         "--", "true"],
        env={**os.environ, **env}, capture_output=True, timeout=20, check=False,
    )  # fmt: skip
    assert (proc.returncode, status.exists(), sorted(os.listdir(tmp_path))) == (2, False, [])


# --------------------------------------------------------------------------- LocalProcessController.stop


async def test_stop_terminates_wrapper_and_task(executor: Executor, env: dict[str, str]) -> None:
    handle = await spawn(executor, ["sleep", "60"], env)
    # The wrapper holds no stray fd: its own are the task's two pipes, the two spools, its poll and the task's pidfd.
    held = sorted(os.readlink(f"/proc/{handle.pid}/fd/{fd}") for fd in listdir(f"/proc/{handle.pid}/fd"))
    err = str(executor.output_path(handle, "stderr"))
    assert [h for h in held if not h.startswith("pipe:")] == sorted(
        ["/dev/null"] * 3 + [handle.log_path, err, "anon_inode:[eventpoll]", "anon_inode:[pidfd]"]
    )
    assert len(held) == 9
    [child] = children_of(handle.pid)
    assert comm(child) == "sleep"
    assert os.getpgid(child) == handle.pgid

    started = time.monotonic()
    assert await LocalProcessController().stop(handle) == "stopped"
    assert time.monotonic() - started < 3
    assert not running(handle.pid)
    assert wait_until(lambda: not running(child))
    assert executor.exit_status(handle) == ExitStatus(exit_code=None, signal=signal.SIGTERM)
    assert LocalProcessController().verify(handle) == "exited"
    assert await LocalProcessController().stop(handle) == "already_exited"


async def test_stop_kills_a_group_that_ignores_term(executor: Executor, env: dict[str, str]) -> None:
    handle = await spawn(executor, ["sh", "-c", 'trap "" TERM; sleep 60; echo unreachable'], env)
    assert await await_until(lambda: any(comm(p) == "sleep" for p in group_members(handle.pgid)))
    members = group_members(handle.pgid)
    assert handle.pid in members and len(members) >= 2

    started = time.monotonic()
    escalated: list[float] = []
    controller = LocalProcessController(grace_s=0.5, poll_s=0.02)
    assert await controller.stop(handle, before_kill=lambda: escalated.append(time.monotonic())) == "killed"
    assert 0.5 <= time.monotonic() - started < 5
    assert len(escalated) == 1 and escalated[0] - started >= 0.5  # once, when the grace was over
    assert await await_until(lambda: not any(running(p) for p in members), within=3)
    assert group_members(handle.pgid) == []
    # The task was KILLed, not its wrapper: the wrapper recorded how the task ended.
    assert executor.exit_status(handle) == ExitStatus(exit_code=None, signal=signal.SIGKILL)


async def test_a_task_that_obeys_term_is_stopped_without_a_kill(executor: Executor, env: dict[str, str]) -> None:
    handle = await spawn(executor, ["sh", "-c", "sleep 60"], env)
    escalated: list[bool] = []
    assert await LocalProcessController(grace_s=5).stop(handle, before_kill=lambda: escalated.append(True)) == "stopped"
    assert escalated == [] and executor.exit_status(handle) == ExitStatus(exit_code=None, signal=signal.SIGTERM)


async def test_stop_after_exit_sends_nothing(executor: Executor, env: dict[str, str]) -> None:
    handle = await spawn(executor, ["sh", "-c", "exit 4"], env)
    assert await wait_status(executor, handle) == ExitStatus(exit_code=4, signal=None)
    assert await LocalProcessController().stop(handle) == "already_exited"
    assert executor.exit_status(handle) == ExitStatus(exit_code=4, signal=None)


# ------------------------------------------------------------- identity: each outcome proven by a surviving victim


async def test_a_proven_identity_is_alive_and_stoppable(victim: Victim, tmp_path: Path) -> None:
    """The control case for the tests below: the same kind of victim with a correct handle is signalled."""
    proc = victim()
    handle = handle_for(proc, tmp_path)
    controller = LocalProcessController(grace_s=1.0)
    assert controller.verify(handle) == "alive"
    assert await controller.stop(handle) == "stopped"
    assert not running(proc.pid)


async def test_status_file_means_exited_and_no_signal(victim: Victim, tmp_path: Path) -> None:
    proc = victim()
    handle = handle_for(proc, tmp_path)
    write_text(handle.status_path, '{"exitCode":0,"signal":null}')
    controller = LocalProcessController(grace_s=0.1)
    assert controller.verify(handle) == "exited"
    assert await controller.stop(handle) == "already_exited"
    await asyncio.sleep(0.1)
    assert running(proc.pid) and proc.poll() is None


async def test_reused_pid_is_unverified_and_never_signalled(victim: Victim, tmp_path: Path) -> None:
    proc = victim()
    handle = replace(handle_for(proc, tmp_path), start_time=handle_for(proc, tmp_path).start_time + 1)
    controller = LocalProcessController(grace_s=0.1)
    assert controller.verify(handle) == "unverified"
    assert await controller.stop(handle) == "unverified"
    await asyncio.sleep(0.1)
    assert running(proc.pid) and proc.poll() is None


async def test_other_boot_is_exited_and_never_signalled(victim: Victim, tmp_path: Path) -> None:
    proc = victim()
    handle = replace(handle_for(proc, tmp_path), boot_id=str(uuid.uuid4()))
    controller = LocalProcessController(grace_s=0.1)
    assert controller.verify(handle) == "exited"
    assert await controller.stop(handle) == "already_exited"
    await asyncio.sleep(0.1)
    assert running(proc.pid) and proc.poll() is None


async def test_group_mismatch_is_unverified_and_never_signalled(victim: Victim, tmp_path: Path) -> None:
    proc, other = victim(), victim()
    handle = replace(handle_for(proc, tmp_path), pgid=other.pid)  # start time matches, group does not
    controller = LocalProcessController(grace_s=0.1)
    assert controller.verify(handle) == "unverified"
    assert await controller.stop(handle) == "unverified"

    # a process that is not the leader of its group (it shares pytest's group)
    member = victim(new_session=False)
    as_leader = replace(handle_for(member, tmp_path), pgid=member.pid)
    assert controller.verify(as_leader) == "unverified"
    assert await controller.stop(as_leader) == "unverified"
    await asyncio.sleep(0.1)
    for p in (proc, other, member):
        assert running(p.pid) and p.poll() is None


# --------------------------------------------------------------------------- the wrapper outlives the Worker

_WORKER_SCRIPT = """
import asyncio, json, sys, time
from pathlib import Path
from qinglong.worker.executor import Executor, TaskPolicy

async def main() -> None:
    env = json.loads(sys.argv[2])
    handle = await Executor(Path(sys.argv[1]), policy=TaskPolicy(allow_root_tasks=True)).spawn(
        offer_id="offer-1", launch_nonce="n1", argv=["sleep", "60"], env=env,
        timeout_ms=60000, deadline_at_ms=1_900_000_000_000,
    )
    print(json.dumps(handle.to_dict()), flush=True)

asyncio.run(main())
time.sleep(60)
"""


def test_wrapper_survives_the_worker_being_killed(tmp_path: Path, env: dict[str, str]) -> None:
    worker = subprocess.Popen(
        [sys.executable, "-c", _WORKER_SCRIPT, str(tmp_path / "work"), json.dumps(env)],
        env={**os.environ, MARK_VAR: env[MARK_VAR]},
        stdout=subprocess.PIPE,
    )
    try:
        assert worker.stdout is not None
        ready, _, _ = select.select([worker.stdout], [], [], 20)
        assert ready, "the worker script did not print a handle"
        handle = ProcessHandle.from_dict(json.loads(worker.stdout.readline()))
    finally:
        worker.kill()
        worker.wait()
        if worker.stdout is not None:
            worker.stdout.close()

    assert handle.pid not in children_of(os.getpid())
    [task] = children_of(handle.pid)
    assert comm(task) == "sleep"
    controller = LocalProcessController()
    assert controller.verify(handle) == "alive"
    time.sleep(0.2)
    assert running(task)
    assert asyncio.run(controller.stop(handle)) == "stopped"
    assert wait_until(lambda: not running(task))
    assert Executor(tmp_path / "work", policy=AS_ROOT_TOO).exit_status(handle) == ExitStatus(
        exit_code=None, signal=signal.SIGTERM
    )
    assert controller.verify(handle) == "exited"


# --------------------------------------------------------------------------- /proc, clocks, the handle


@pytest.mark.parametrize("name", ["a b) (c", ") Z 1 2 3 (x"])
def test_process_start_time_parses_odd_comm(tmp_path: Path, victim: Victim, name: str) -> None:
    sleep = shutil.which("sleep")
    assert sleep is not None
    link = tmp_path / name
    link.symlink_to(os.path.realpath(sleep))
    proc = victim([str(link), "30"])
    assert comm(proc.pid) == name

    start_time = process_start_time(proc.pid)
    assert isinstance(start_time, int)
    ticks = os.sysconf("SC_CLK_TCK")
    uptime_s = float(Path("/proc/uptime").read_text().split()[0])
    assert abs(start_time / ticks - uptime_s) < 5  # started just now
    assert process_start_time(proc.pid) == start_time

    proc.kill()
    proc.wait()
    assert process_start_time(proc.pid) is None


def test_boottime_is_monotonic_and_boot_id_is_a_uuid() -> None:
    samples = [boottime_ns() for _ in range(1000)]
    assert samples == sorted(samples)
    assert boottime_ns() >= time.monotonic_ns() - 1_000_000  # BOOTTIME also counts suspend
    value = boot_id()
    assert str(uuid.UUID(value)) == value
    assert boot_id() == value


def test_handle_round_trip_and_strict_shape() -> None:
    handle = ProcessHandle(
        pid=10, pgid=10, start_time=123, boot_id=boot_id(), log_path="/l", status_path="/s", launch_nonce="n"
    )
    assert ProcessHandle.from_dict(json.loads(json.dumps(handle.to_dict()))) == handle
    good = handle.to_dict()
    bad_shapes: list[object] = [
        {k: v for k, v in good.items() if k != "pgid"},
        {**good, "extra": 1},
        {**good, "pid": True},
        {**good, "start_time": "123"},
        {**good, "pid": 0},
        {**good, "start_time": -1},
        {**good, "boot_id": ""},
        {**good, "log_path": None},
        [("pid", 10)],
    ]
    for bad in bad_shapes:
        with pytest.raises(ValueError):
            ProcessHandle.from_dict(bad)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- dead-man's switch, launch evidence


async def test_the_dead_mans_switch_stops_the_whole_group_at_an_unextended_expiry(
    tmp_path: Path, env: dict[str, str]
) -> None:
    executor = Executor(tmp_path / "work", stop_grace_s=0.5, policy=AS_ROOT_TOO)
    # The task ignores TERM and leaves a grandchild in the group: both must be gone after the grace.
    script = "trap '' TERM; sleep 30 & while :; do sleep 0.1; done"
    expiry = boottime_ns() + 1_500_000_000
    handle = await executor.spawn(
        offer_id="offer-1", launch_nonce=uuid.uuid4().hex, argv=["sh", "-c", script], env=env,
        timeout_ms=None, deadline_at_ms=None, lease_expires_boottime_ns=expiry,
    )  # fmt: skip
    assert await await_until(lambda: len(group_members(handle.pgid)) >= 3)
    executor.extend_lease(handle, expiry + 1_000_000_000)  # one renewal: the switch moves with it
    status = await wait_status(executor, handle)
    stopped = boottime_ns()
    assert status == ExitStatus(exit_code=None, signal=signal.SIGKILL)  # TERM was ignored: KILL after the grace
    assert expiry + 1_000_000_000 <= stopped < expiry + 1_000_000_000 + 2_500_000_000, "not at the extended expiry"
    assert await await_until(lambda: group_members(handle.pgid) == [])
    assert b"the Lease expired locally" in output(executor, handle, "stderr")
    assert output(executor, handle) == b""


async def test_a_renewal_can_move_the_switch_earlier(tmp_path: Path, env: dict[str, str]) -> None:
    executor = Executor(tmp_path / "work", stop_grace_s=0.2, policy=AS_ROOT_TOO)
    handle = await executor.spawn(
        offer_id="offer-1", launch_nonce=uuid.uuid4().hex, argv=["sleep", "30"], env=env,
        timeout_ms=None, deadline_at_ms=None, lease_expires_boottime_ns=boottime_ns() + 60_000_000_000,
    )  # fmt: skip
    executor.extend_lease(handle, boottime_ns() + 500_000_000)  # a short Lease TTL after a long offer TTL
    assert await wait_status(executor, handle) == ExitStatus(exit_code=None, signal=signal.SIGTERM)


def test_launch_evidence_without_a_log_proves_the_spawn_never_happened(executor: Executor) -> None:
    found = recover_launch(executor, "offer-1", "nonce-1")
    assert (found.handle, found.never_started) == (None, True)


def test_launch_evidence_with_a_log_but_no_wrapper_identity_proves_the_task_never_started(executor: Executor) -> None:
    log, _ = executor.paths("offer-1", "nonce-1")
    log.parent.mkdir(parents=True)
    log.touch()
    found = recover_launch(executor, "offer-1", "nonce-1")
    assert (found.handle, found.never_started) == (None, True)


async def test_launch_evidence_adopts_the_running_wrapper_and_a_corrupt_identity_needs_an_operator(
    executor: Executor, env: dict[str, str]
) -> None:
    handle = await spawn(executor, ["sleep", "30"], env)
    found = recover_launch(executor, "offer-1", handle.launch_nonce)
    assert found.handle == handle and not found.never_started
    executor.identity_path(Path(handle.log_path)).write_text("{not json")
    corrupt = recover_launch(executor, "offer-1", handle.launch_nonce)
    assert (corrupt.handle, corrupt.never_started) == (None, False)
    assert await LocalProcessController(grace_s=0.2).stop(handle) == "stopped"


async def test_a_task_sees_only_what_its_plan_gives_it(executor: Executor, env: dict[str, str]) -> None:
    """No PYTHONPATH, virtualenv or other Worker environment reaches the task: the runner starts
    isolated, and the task's environment is its plan's env (PATH added only when the plan has none)."""
    handle = await spawn(executor, ["env"], env)
    assert await wait_status(executor, handle) == ExitStatus(exit_code=0, signal=None)
    names = sorted(line.split("=", 1)[0] for line in output(executor, handle).decode().splitlines())
    # LC_CTYPE=C.UTF-8 is Python's own locale coercion (PEP 538) in the wrapper when the plan sets no locale
    assert set(names) - {"LC_CTYPE"} == {"PATH", MARK_VAR}, names
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('qinglong') is not None)"
    handle = await spawn(executor, ["python3", "-c", probe], env)
    assert await wait_status(executor, handle) == ExitStatus(exit_code=0, signal=None), "the task imports the Worker"


def test_without_a_pidfd_the_wrapper_still_copies_and_sees_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel older than pidfd_open (Linux 5.3): the wait looks for the child's exit every POLL_S instead."""

    def no_pidfd(pid: int, flags: int = 0) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    out = spool.Writer(str(tmp_path / "p.log"), 8, 8)
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    child = subprocess.Popen(["sh", "-c", "printf 0123456789abcdefghij; sleep 0.2; exit 4"], stdout=out_w)
    os.close(out_w)
    pump = runner._Pump(child, {out_r: out})
    assert pump.wait(None) == 4
    pump.close()
    out.close()
    assert spool.size(str(tmp_path / "p.log")) == 20
    assert spool.read(str(tmp_path / "p.log"), 0, 99) == (0, b"01234567")
    assert spool.read(str(tmp_path / "p.log"), 8, 99) == (8, b"89abcdef")
