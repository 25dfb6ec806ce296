"""A task's Project secrets through the Worker's whole lifecycle (Processor, Executor, coordinator, journal), with
the control plane stubbed at the client boundary only (tests/unit/worker/stub_plane.py; the real shell and
Worker together: tests/integration/test_secret_leaks.py): the task gets its secret variables and files (their
bytes in the Run's directory, or on a tmpfs store with a symlink at each path); no start without every secret
its plan names (`secret_unavailable`, first answer or the replay before the spawn); a file that would follow a
symlink is a start failure (`secret_file_refused`) and nothing is spawned; the output leaves the Worker masked,
also after a restart, which gets the values again by replaying the starting ACK (after the running ACK when that
had not applied) before it ships anything, and ships nothing more when they cannot be had (`output.unmaskable`);
the secret files go when the Attempt ends (completion, start failure, the control plane's end, a restart's
cleanup from the journal) and nothing else goes; no value is ever in the journal or a log line.
Touches: temporary folders, real task processes, the journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import pwd
import shutil
import signal
import sqlite3
import stat
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from qinglong.wire import LEASE_CONTROL_RESPONSES, ActivationResponse
from qinglong.wire.offer import Plan
from qinglong.worker import inbox as inbox_module
from qinglong.worker.client import MAX_RESPONSE, _cap
from qinglong.worker.controller import LocalProcessController
from qinglong.worker.delivery import SHM, FileDelivery, is_tmpfs, plan_files, write_files
from qinglong.worker.executor import Executor, TaskPolicy
from qinglong.worker.identity import ProcessHandle
from qinglong.worker.inbox import Inbox
from qinglong.worker.journal import Journal, State
from qinglong.worker.lifecycle import Lifecycle
from qinglong.worker.masking import mask_all, patterns
from qinglong.worker.runner import stderr_path
from tests.unit.worker.stub_plane import StubPlane, offered

TOKEN = b"tok-" + uuid.uuid4().hex.encode()
PASSWORD = b"pw-" + uuid.uuid4().hex.encode() + b"\n"
SECRETS = {"API_TOKEN": TOKEN, "DB_PASSWORD": PASSWORD}
AS_ROOT_TOO = TaskPolicy(allow_root_tasks=True)


def python(folder: Path, source: str) -> tuple[str, ...]:
    script = folder / f"task-{uuid.uuid4().hex[:8]}.py"
    script.write_text(source)
    return (sys.executable, str(script))


def plan(argv: tuple[str, ...]) -> Plan:
    return Plan(
        argv=argv,
        secret_env={"TOKEN": "API_TOKEN"},
        secret_files={"keys/token": "API_TOKEN", "db.pw": "DB_PASSWORD"},
    )


# The task prints its secrets (plainly, as base64 and inside JSON), waits for `go`, prints them again and ends.
PRINTS = """import base64, json, os, pathlib, sys, time
out = sys.stdout.buffer
def show(tag):
    token = os.environb[b"TOKEN"]
    out.write(b"%s env=" % tag + token + b" file=" + open("keys/token", "rb").read() + b"\\n")
    out.write(b"b64=" + base64.b64encode(token) + b" json=" + json.dumps({"t": token.decode()}).encode() + b"\\n")
    out.write(b"pw=" + open("db.pw", "rb").read())
    out.flush()
show(b"before")
out.write(b"-" * 64 + b"\\n"); out.flush()  # more output: what the masker held back can go
pathlib.Path("made-by-the-task").write_text("kept")
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
show(b"after")
sys.stderr.buffer.write(b"err " + os.environb[b"TOKEN"] + b"\\n")
"""


class Rig:
    """A journal, the real Executor and controller, and Lifecycles over a StubPlane."""

    def __init__(self, tmp_path: Path, policy: TaskPolicy = AS_ROOT_TOO, store_base: Path | None = None) -> None:
        self.root = tmp_path
        self.journal_path = tmp_path / "state" / "inbox.sqlite"
        self.store_base = store_base
        self.executor = Executor(tmp_path / "work", stop_grace_s=1.0, policy=policy, store_base=store_base)
        self.lifecycles: list[Lifecycle] = []
        self.removed_output: dict[str, bytes] = {}  # raw output files as they were when the Worker removed them

    def lifecycle(self, plane: StubPlane) -> Lifecycle:
        lc = Lifecycle(
            journal_path=self.journal_path, client=plane, executor=self.executor,
            controller=LocalProcessController(grace_s=1.0), generation=1, capacity=1,
        )  # fmt: skip
        self.lifecycles.append(lc)
        return lc

    async def tick_until(self, lc: Lifecycle, done: Callable[[], bool], within: float = 15.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while True:
            await lc.tick()
            if done():
                return
            if loop.time() > deadline:
                raise AssertionError(f"not done within {within} s (journal: {self.rows()})")
            await asyncio.sleep(0.05)

    def rows(self) -> list[tuple[str, dict[str, Any]]]:
        if not self.journal_path.exists():
            return []
        conn = sqlite3.connect(f"file:{self.journal_path}?mode=ro", uri=True)
        try:
            return [(r[0], json.loads(r[1])) for r in conn.execute("select state, data from inbox order by seq")]
        except sqlite3.OperationalError:
            return []
        finally:
            conn.close()

    def state(self) -> str | None:
        rows = self.rows()
        return rows[0][0] if rows else None

    def data(self) -> dict[str, Any]:
        [(_, data)] = self.rows()
        return data

    def handle(self) -> ProcessHandle:
        return ProcessHandle.from_dict(self.data()["handle"])

    def run_dir(self, plane: StubPlane) -> Path:
        return self.executor.run_dir(plane.offer.offer.run_id)

    def journal_bytes(self) -> bytes:
        folder = self.journal_path.parent
        return b"".join(p.read_bytes() for p in folder.iterdir() if p.is_file())

    def handles(self) -> Iterator[ProcessHandle]:
        for _, data in self.rows():
            with contextlib.suppress(KeyError, TypeError, ValueError):
                yield ProcessHandle.from_dict(data["handle"])


@pytest.fixture(params=["run-dir", "tmpfs-store"])
async def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> AsyncIterator[Rig]:
    store_base = None
    if request.param == "tmpfs-store":
        if not is_tmpfs(SHM):
            pytest.skip("this machine has no tmpfs at /dev/shm")
        store_base = SHM / f"ql-test-{uuid.uuid4().hex}"
    made = Rig(tmp_path, store_base=store_base)
    removed = made.removed_output
    remove = inbox_module._remove_output

    def keep_then_remove(inbox: Inbox) -> None:
        """The ended launch's raw output, kept for the test's comparison, then removed as the Worker does."""
        assert inbox.handle is not None
        log_path = str(inbox.handle["log_path"])
        for path in (log_path, stderr_path(log_path)):
            with contextlib.suppress(FileNotFoundError), open(path, "rb") as f:
                removed[path] = f.read()
        remove(inbox)
        assert not any(os.path.exists(p) for p in removed), "the raw output outlived the Attempt"

    monkeypatch.setattr(inbox_module, "_remove_output", keep_then_remove)
    try:
        yield made
    finally:
        for lc in made.lifecycles:
            with contextlib.suppress(Exception):
                await lc.stop()
        for handle in made.handles():  # no task outlives its test
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(handle.pgid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(handle.pid, 0)  # noqa: ASYNC222  a killed child of ours: reaped at once
        if store_base is not None:
            left = sorted(str(p.relative_to(store_base)) for p in store_base.rglob("*")) if store_base.exists() else []
            shutil.rmtree(store_base, ignore_errors=True)
            assert left == [], f"the tmpfs store kept {left}"


def assert_no_value_in(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    """No value, raw or in the forms the masker knows, in the journal's files or in a log line."""
    stored = rig.journal_bytes()
    text = "\n".join(r.getMessage() for r in caplog.records).encode()
    for form in patterns(SECRETS.values()):
        assert form not in stored, "a value is in the journal"
        assert form not in text, "a value is in a log line"


def shipped_whole(plane: StubPlane, stream: str = "stdout") -> bytes:
    return plane.streams[stream].whole()


async def test_a_task_gets_its_secrets_its_output_leaves_masked_and_its_files_go_with_it(
    rig: Rig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "qinglong")
    go = tmp_path / "go"
    plane = StubPlane(offered(plan((*python(tmp_path, PRINTS), str(go)))), SECRETS)
    lc = rig.lifecycle(plane)
    await lc.start()
    await rig.tick_until(lc, lambda: b"before env=***" in shipped_whole(plane) and b"pw=***" in shipped_whole(plane))

    run_dir = rig.run_dir(plane)
    token, pw = run_dir / "keys" / "token", run_dir / "db.pw"
    assert (token.read_bytes(), pw.read_bytes()) == (TOKEN, PASSWORD)
    for path in (token, pw):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.stat().st_uid == os.geteuid()
    assert stat.S_IMODE((run_dir / "keys").stat().st_mode) == 0o700
    data = rig.data()
    assert data["secret_dir"] == str(run_dir)
    if rig.store_base is not None:  # the bytes on the tmpfs, a symlink at each path
        store = Path(data["secret_store"])
        assert store.parent == rig.store_base and token.is_symlink() and pw.is_symlink()
        assert sorted((store / name).read_bytes() for name in os.listdir(store)) == sorted((TOKEN, PASSWORD))
    assert sorted(f["path"] for f in data["secret_files"]) == ["db.pw", "keys/token"], "the journal names the files"
    assert all(f["ino"] is not None for f in data["secret_files"])

    go.touch()
    await rig.tick_until(lc, lambda: rig.state() == "completed")
    assert plane.status == "succeeded"
    handle = rig.handle()
    raw_out = rig.removed_output[handle.log_path]
    raw_err = rig.removed_output[stderr_path(handle.log_path)]
    assert TOKEN in raw_out and PASSWORD in raw_out, "the task did not see its secrets"
    values = patterns(SECRETS.values())
    assert shipped_whole(plane) == mask_all(values, raw_out)
    assert shipped_whole(plane, "stderr") == mask_all(values, raw_err) == b"err ***\n"
    for chunk in plane.shipped("stdout") + plane.shipped("stderr"):
        assert not any(form in chunk for form in values), "a value left the Worker"
    assert shipped_whole(plane).count(b"***") == 10  # env, file, base64, JSON, password; twice

    assert not token.exists() and not pw.exists(), "a secret file outlived its Attempt"
    assert sorted(os.listdir(run_dir)) == ["keys", "made-by-the-task"], "something else was removed, or left"
    assert rig.data()["secret_files"] == []
    assert_no_value_in(rig, caplog)


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another user needs root")
@pytest.mark.parametrize("on_tmpfs", [False, True])
async def test_a_task_as_nobody_owns_its_secret_files_and_folders(tmp_path: Path, on_tmpfs: bool) -> None:
    nobody = pwd.getpwnam("nobody")
    store_base = SHM / f"ql-test-{uuid.uuid4().hex}" if on_tmpfs else None
    rig = Rig(tmp_path, TaskPolicy(run_as=frozenset({"nobody"})), store_base)
    script = 'test "$(id -u)" = "$1" || exit 3; while [ ! -e go ]; do sleep 0.05; done; cat keys/token db.pw'
    argv = ("sh", "-c", script, "sh", str(nobody.pw_uid))
    plane = StubPlane(
        offered(Plan(argv=argv, user="nobody", secret_files={"keys/token": "API_TOKEN", "db.pw": "DB_PASSWORD"})),
        SECRETS,
    )
    lc = rig.lifecycle(plane)
    try:
        await lc.start()
        run_dir = rig.run_dir(plane)
        await rig.tick_until(lc, lambda: rig.state() == "running_acknowledged")
        for path in (run_dir / "keys", run_dir / "keys" / "token", run_dir / "db.pw"):
            st = path.stat()
            mode = 0o700 if path.is_dir() else 0o600
            assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (nobody.pw_uid, nobody.pw_gid, mode), path
        if store_base is not None:  # the task's own store folder, in the Worker's base it may only pass through
            store = Path(rig.data()["secret_store"])
            for folder, owner, mode in ((store, nobody.pw_uid, 0o700), (store_base, os.geteuid(), 0o711)):
                st = os.stat(folder)
                assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (owner, mode), folder
        (run_dir / "go").touch()
        await rig.tick_until(lc, lambda: rig.state() == "completed")
    finally:
        await lc.stop()
        for handle in rig.handles():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(handle.pgid, signal.SIGKILL)
        if store_base is not None:
            assert not any(store_base.iterdir()), "a store folder outlived its Attempt"
            shutil.rmtree(store_base)
    assert plane.status == "succeeded", shipped_whole(plane, "stderr")
    assert shipped_whole(plane) == b"******", "the task as nobody could not read its files, or they were not masked"
    assert sorted(os.listdir(run_dir)) == ["go", "keys"]


def start_failure(plane: StubPlane) -> str | None:
    calls = [c for c in plane.calls if c.name == "start-failure"]
    return calls[-1].body.error_code if calls else None


def assert_nothing_spawned(rig: Rig, plane: StubPlane) -> None:
    assert rig.data().get("handle") is None
    assert not (rig.executor.paths(plane.offer.offer.offer_id, "x")[0].parent).exists(), "a launch folder exists"


async def test_no_start_without_every_secret_the_plan_names(rig: Rig, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    plane = StubPlane(offered(plan(("touch", str(marker)))), {"API_TOKEN": TOKEN})  # DB_PASSWORD not delivered
    lc = rig.lifecycle(plane)
    await lc.start()
    await rig.tick_until(lc, lambda: rig.state() == "completed")
    assert start_failure(plane) == "secret_unavailable" and plane.names().count("starting") == 1
    assert_nothing_spawned(rig, plane)
    assert not rig.run_dir(plane).exists() and not marker.exists()


async def test_a_secret_gone_by_the_replay_before_the_spawn_is_a_start_failure_too(rig: Rig, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    plane = StubPlane(offered(plan(("touch", str(marker)))), SECRETS)

    def delete_after_the_first_answer(name: str) -> None:
        if name == "starting":
            plane.secrets.pop("DB_PASSWORD", None)  # deleted: its version destroyed, replays leave it out

    plane.after = delete_after_the_first_answer
    lc = rig.lifecycle(plane)
    await lc.start()
    await rig.tick_until(lc, lambda: rig.state() == "completed")
    assert plane.names().count("starting") == 2 and start_failure(plane) == "secret_unavailable"
    assert_nothing_spawned(rig, plane)
    assert not marker.exists()


async def test_a_secret_file_through_a_symlink_is_refused_and_nothing_is_spawned(rig: Rig, tmp_path: Path) -> None:
    marker, outside = tmp_path / "ran", tmp_path / "outside"
    outside.mkdir()
    plane = StubPlane(offered(plan(("touch", str(marker)))), SECRETS)
    run_dir = rig.run_dir(plane)
    run_dir.mkdir(parents=True)
    (run_dir / "keys").symlink_to(outside)  # left by an earlier Attempt's task
    lc = rig.lifecycle(plane)
    await lc.start()
    await rig.tick_until(lc, lambda: rig.state() == "completed")
    assert start_failure(plane) == "secret_file_refused"
    assert_nothing_spawned(rig, plane)
    assert list(outside.iterdir()) == [] and os.listdir(run_dir) == ["keys"] and not marker.exists()
    assert rig.data()["secret_files"] == []


WAITS = """import os, sys, time
out = sys.stdout.buffer
for i in range(3):
    out.write(b"%d first " % i + os.environb[b"TOKEN"] + b"\\n"); out.flush()
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
for i in range(3):
    out.write(b"%d then " % i + os.environb[b"TOKEN"] + b" " + open("db.pw", "rb").read())
"""


async def restarted(
    rig: Rig, tmp_path: Path, *, before_restart: Callable[[StubPlane], object] = lambda plane: None
) -> tuple[StubPlane, int]:
    """A task runs under a first Worker until some of its output is shipped; that Worker stops (the task runs on);
    `before_restart` changes the control plane; a second Worker takes over and the task ends. (The plane, and how
    many calls the first Worker made.)"""
    go = tmp_path / "go"
    plane = StubPlane(offered(plan((*python(tmp_path, WAITS), str(go)))), SECRETS)
    first = rig.lifecycle(plane)
    await first.start()
    await rig.tick_until(first, lambda: b"1 first ***" in shipped_whole(plane))
    await first.stop()
    before_restart(plane)
    made = len(plane.calls)
    second = rig.lifecycle(plane)  # a new process: it knows no value
    await second.start()
    go.touch()
    await rig.tick_until(second, lambda: rig.state() == "completed")
    return plane, made


async def test_a_restarted_worker_gets_the_values_again_before_it_ships_and_goes_on_masked(
    rig: Rig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "qinglong")
    plane, made = await restarted(rig, tmp_path)
    after = [c.name for c in plane.calls[made:] if c.name in ("running", "starting", "output", "completion")]
    assert after[0] == "starting" and "output" in after and after[-1] == "completion", after
    raw = rig.removed_output[rig.handle().log_path]
    assert shipped_whole(plane) == mask_all(patterns(SECRETS.values()), raw), "a gap, a duplicate or a value"
    assert shipped_whole(plane).count(b"***") == 9
    assert not (rig.run_dir(plane) / "db.pw").exists() and not (rig.run_dir(plane) / "keys" / "token").exists()
    assert_no_value_in(rig, caplog)


async def test_a_restarted_worker_that_cannot_have_the_values_ships_no_more_and_still_completes(
    rig: Rig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "qinglong")
    plane, made = await restarted(rig, tmp_path, before_restart=lambda plane: plane.secrets.pop("API_TOKEN"))
    after = [c.name for c in plane.calls[made:] if c.name in ("running", "starting", "output", "completion")]
    assert after == ["starting", "completion"], after
    assert plane.status == "succeeded"
    unmaskable = [
        r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "output.unmaskable"
    ]
    assert unmaskable == [{"event": "output.unmaskable", "run_id": plane.offer.offer.run_id}], "the run id only"
    assert b"then" not in shipped_whole(plane), "output was shipped without its values"
    assert not (rig.run_dir(plane) / "db.pw").exists() and not (rig.run_dir(plane) / "keys" / "token").exists()


async def test_after_a_restart_the_running_ack_goes_before_the_replay_that_delivers_the_values(
    rig: Rig, tmp_path: Path
) -> None:
    """The running ACK (taken along by the renewal) never got through and the completion is pending when the Worker
    restarts: a replayed starting ACK could then find the Attempt `starting` (and, under a cancel intent, end it as
    never started), so the running ACK goes first; the replay answers already_running with the values."""
    plane = StubPlane(offered(plan(python(tmp_path, WAITS.replace("while not", "while False and not")))), SECRETS)
    plane.fail.update({"lease-control": 10_000, "completion": 10_000})
    first = rig.lifecycle(plane)
    await first.start()
    await rig.tick_until(first, lambda: rig.state() == "completion_pending" and "completion" in plane.names())
    await first.stop()
    assert plane.status == "starting" and rig.data()["snapshot"]["attemptStatus"] == "starting"
    plane.fail.clear()
    made = len(plane.calls)
    second = rig.lifecycle(plane)
    await second.start()
    await rig.tick_until(second, lambda: rig.state() == "completed")
    after = [c.name for c in plane.calls[made:] if c.name in ("running", "starting", "output", "completion")]
    assert after[:3] == ["running", "starting", "output"] and after[-1] == "completion", after
    raw = rig.removed_output[rig.handle().log_path]
    assert shipped_whole(plane) == mask_all(patterns(SECRETS.values()), raw)


async def test_an_attempt_the_control_plane_ended_takes_its_secret_files_with_it(rig: Rig, tmp_path: Path) -> None:
    plane = StubPlane(offered(plan(("sleep", "30"))), SECRETS)
    lc = rig.lifecycle(plane)
    await lc.start()
    await rig.tick_until(lc, lambda: rig.state() == "running_acknowledged")
    assert (rig.run_dir(plane) / "db.pw").exists()
    plane.terminal = True
    await rig.tick_until(lc, lambda: rig.state() == "control_plane_terminal")
    assert os.listdir(rig.run_dir(plane)) == ["keys"]


def journal_record(rig: Rig, plane: StubPlane, state: State, **fields: Any) -> None:
    inbox = Inbox(offer=plane.offer, session_id=str(uuid.uuid4()), lease_version=1, **fields)
    with Journal.open(rig.journal_path) as journal:
        journal.insert(plane.offer.offer.offer_id, state, inbox.to_data())


async def test_a_restart_during_the_launch_removes_the_files_from_what_the_journal_kept(rig: Rig) -> None:
    """The Worker died after the files' identities were journaled, with a file linked and a temporary name left,
    before the log: the launch never started, the start fails, and the files go; a file that is not the launch's
    stays."""
    plane = StubPlane(offered(plan(("true",))), SECRETS)
    plane.status = "starting"
    nonce = uuid.uuid4().hex
    run_dir = rig.run_dir(plane)
    run_dir.mkdir(parents=True)
    paths = {"db.pw": PASSWORD, "keys/token": TOKEN}
    store = rig.executor.secret_store(nonce)
    made = write_files(run_dir, FileDelivery(plan_files(paths, nonce), paths, lambda files: None), None, store)
    if store is None:
        os.link(run_dir / "db.pw", run_dir / made[0].temp)  # as if the temporary name had not gone yet
    (run_dir / "keys" / "token").unlink()
    (run_dir / "keys" / "token").write_bytes(b"the task's own")  # (another inode, unless the file system reuses it)
    foreign = store is not None or (run_dir / "keys" / "token").stat().st_ino != made[1].ino
    journal_record(
        rig, plane, "launching", launch_nonce=nonce, secret_dir=str(run_dir),
        secret_store=None if store is None else str(store), secret_files=tuple(f.to_dict() for f in made),
    )  # fmt: skip
    lc = rig.lifecycle(plane)
    await lc.start()
    await rig.tick_until(lc, lambda: rig.state() == "completed")
    assert start_failure(plane) == "launch.never_started"
    left = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*"))
    assert left == (["keys", "keys/token"] if foreign else ["keys"])


async def test_a_worker_that_starts_retries_the_files_an_ended_record_kept(rig: Rig) -> None:
    plane = StubPlane(offered(plan(("true",))), SECRETS)
    run_dir = rig.run_dir(plane)
    run_dir.mkdir(parents=True)
    paths = {"db.pw": PASSWORD}
    nonce = uuid.uuid4().hex
    store = rig.executor.secret_store(nonce)
    made = write_files(run_dir, FileDelivery(plan_files(paths, nonce), paths, lambda files: None), None, store)
    # Ended while a file system fault kept the file (the record is final: only a start can retry it).
    journal_record(rig, plane, "completed", secret_dir=str(run_dir), secret_files=tuple(f.to_dict() for f in made),
                   secret_store=None if store is None else str(store))  # fmt: skip
    lc = rig.lifecycle(plane)
    await lc.start()
    assert os.listdir(run_dir) == []


async def test_a_task_stopped_at_its_local_lease_expiry_takes_its_secret_files_with_it(rig: Rig) -> None:
    plane = StubPlane(offered(plan(("sleep", "30")), lease_ms=2000), SECRETS)
    plane.ttl_ms = 2000
    lc = rig.lifecycle(plane)
    await lc.start()
    await rig.tick_until(lc, lambda: rig.state() == "running_acknowledged")
    assert (rig.run_dir(plane) / "db.pw").exists()
    plane.fail.update({"lease-control": 10_000, "completion": 10_000})  # unreachable: the local Lease runs out
    await rig.tick_until(lc, lambda: rig.state() == "lease_lost_local_execution_stopped")
    assert os.listdir(rig.run_dir(plane)) == ["keys"]
    # Only the wrapper's line about the stop may be on stderr (stdout is empty), and its raw file went with the
    # secrets: unless the database had acknowledged all of it, it is said to be lost (decision 0028), once.
    await lc.tick()
    await lc.tick()
    lost = [c.body for c in plane.calls if c.name == "output-lost"]
    shipped = b"".join(plane.shipped("stderr"))
    assert [b.stream for b in lost] == ([] if shipped.endswith(b"stopping the task\n") else ["stderr"]), (lost, shipped)


def test_the_client_reads_the_largest_activation_answer() -> None:
    """16 secrets of 64 KiB, any bytes: about 1.4 MiB of JSON, over the 128 KiB every other answer is held to."""
    values = {f"S{i:02d}": os.urandom(64 * 1024) for i in range(16)}
    plane = StubPlane(offered(Plan(argv=("true",), secret_env={f"V{i}": n for i, n in enumerate(values)})), values)
    plane.status = "starting"
    answer = ActivationResponse(status="already_starting", snapshot=plane.snapshot(), secrets=plane._delivered())
    size = len(answer.to_json())
    assert MAX_RESPONSE < size <= _cap(ActivationResponse)
    assert ActivationResponse.parse(answer.to_json()).secrets == answer.secrets
    assert _cap(LEASE_CONTROL_RESPONSES) <= MAX_RESPONSE  # every other answer keeps its bound
