"""Retention on a real `qinglong-worker run` process (worker/qinglong/worker/retention.py): an acknowledged
success leaves no file and, past the journal's keep time, no record; a failed Attempt's files stay for
`keep_failed_files_seconds`; a Worker SIGKILLed at every step of clean-up (the test hook
QINGLONG_WORKER_TEST_KILL_AT) has the rest done by its restart; and a Worker killed after a task ended but
before the database acknowledged the completion keeps every file, so its restart completes the Run with the
whole output.
Touches: a fresh database, the in-process shell on TLS 1.3 loopback, Worker processes and their task processes
(this process is their child subreaper meanwhile), the journal (read-only while owned), the test's folders and
this process's environment (the hook variable, only while a first Worker starts).
"""

from __future__ import annotations

import contextlib
import json
import signal
import sqlite3
from pathlib import Path

import pytest

from qinglong.worker.admin import status_path
from qinglong.worker.retention import KILL_AT
from tests.integration.worker.conftest import ENDED_RUN, Rig, WorkerProcess, child_subreaper, poll, read_journal

pytestmark = pytest.mark.db

SWIFT = ("allow_root_tasks = true", "keep_files_seconds = 0", "journal_keep_seconds = 0", "journal_keep_records = 0")


def marks(journal: Path) -> dict[str, tuple[str, str | None]]:
    """offer id → (state, files) as the journal holds them now (read-only)."""
    if not journal.exists():
        return {}
    conn = sqlite3.connect(f"file:{journal}?mode=ro", uri=True)
    try:
        return {o: (s, f) for o, s, f in conn.execute("SELECT offer_id, state, files FROM inbox")}
    except sqlite3.OperationalError:
        return {}
    finally:
        conn.close()


def started(journal: Path, worker: WorkerProcess) -> bool:
    """The Worker process has run its start (and so its first retention pass): its status file is its own."""
    with contextlib.suppress(OSError, ValueError):
        return bool(json.loads(status_path(journal).read_bytes())["pid"] == worker.pid)
    return False


async def stop(worker: WorkerProcess) -> None:
    worker.popen.send_signal(signal.SIGTERM)
    assert await worker.wait(10) == 0, worker.output()


async def test_an_acknowledged_success_leaves_nothing_and_a_failure_keeps_its_files_for_their_time(rig: Rig) -> None:
    ok = rig.add_run({"argv": ["sh", "-c", "echo done; echo x > made-here"], "maxAttempts": 1})
    config = rig.write_config(tick_seconds=0.2, extra=(*SWIFT, "keep_failed_files_seconds = 4"))
    with child_subreaper():
        worker = rig.start_worker_process(config)
        await poll(lambda: rig.run_status(ok) in ENDED_RUN and not marks(rig.journal_path), within=30)
        assert rig.run_status(ok) == "succeeded" and rig.output(ok) == b"done\n"
        launches = [p.name for p in rig.work_dir.iterdir() if p.name not in ("tasks", "bundles")]
        assert launches == [], "a launch folder is left"
        assert list((rig.work_dir / "tasks").iterdir()) == [], "the Run's directory is left"

        bad = rig.add_run({"argv": ["sh", "-c", "echo x > made-here; exit 3"], "maxAttempts": 1})
        await poll(lambda: rig.run_status(bad) in ENDED_RUN and "completed" in str(marks(rig.journal_path)), within=30)
        [(offer, (state, files))] = marks(rig.journal_path).items()
        assert (state, files) == ("completed", "failed")
        launch, run_dir = rig.work_dir / offer, rig.work_dir / "tasks" / bad
        assert (run_dir / "made-here").exists() and any(launch.iterdir()), "a failed Attempt's files went early"
        await poll(lambda: not launch.exists() and not run_dir.exists(), within=15)
        await poll(lambda: not marks(rig.journal_path), within=5)
        await stop(worker)


@pytest.mark.parametrize("step", ["due", "launch_removed", "files_removed", "marked", "pruned"])
async def test_a_worker_killed_at_each_step_of_clean_up_has_it_finished_by_its_restart(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    run = rig.add_run({"argv": ["sh", "-c", "echo done; echo x > made-here"], "maxAttempts": 1})
    config = rig.write_config(tick_seconds=0.2, extra=SWIFT)
    with child_subreaper():
        monkeypatch.setenv(KILL_AT, step)
        first = rig.start_worker_process(config)
        monkeypatch.delenv(KILL_AT)
        assert await first.wait(30) == -signal.SIGKILL, first.output()
        assert rig.run_status(run) == "succeeded"
        rows = read_journal(rig.journal_path)
        row = rows[0] if rows else None
        launch = rig.work_dir / row.offer_id if row is not None else None
        run_dir = rig.work_dir / "tasks" / run
        left = marks(rig.journal_path)
        if step in ("due", "launch_removed", "files_removed"):
            assert row is not None and list(left.values()) == [("completed", "succeeded")], left
            assert launch is not None and launch.exists() == (step == "due")
            assert run_dir.exists() == (step != "files_removed")
        elif step == "marked":
            assert list(left.values()) == [("completed", "removed")] and not run_dir.exists()
        else:
            assert left == {} and not run_dir.exists()

        second = rig.start_worker_process(config)
        await poll(lambda: started(rig.journal_path, second), within=20)
        assert not marks(rig.journal_path)
        assert not run_dir.exists() and (launch is None or not launch.exists())
        await stop(second)
    assert "files.removed" in second.output() or step in ("marked", "pruned")


async def test_a_worker_killed_before_its_completion_was_acknowledged_keeps_everything_and_completes_after_restart(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["sh", "-c", "echo out; echo err >&2; echo x > made-here"]
    run = rig.add_run({"argv": argv, "maxAttempts": 1})
    config = rig.write_config(tick_seconds=0.2, extra=SWIFT)
    with child_subreaper():
        monkeypatch.setenv(KILL_AT, "completion_pending")
        first = rig.start_worker_process(config)
        monkeypatch.delenv(KILL_AT)
        assert await first.wait(30) == -signal.SIGKILL, first.output()
        assert rig.run_status(run) == "running", "the completion went before the kill"
        [(offer, mark)] = marks(rig.journal_path).items()
        assert mark == ("completion_pending", None)
        launch, run_dir = rig.work_dir / offer, rig.work_dir / "tasks" / run
        assert (run_dir / "made-here").exists()
        assert sorted(p.suffix for p in launch.iterdir()) == [".err", ".json", ".json", ".lease", ".log"]

        second = rig.start_worker_process(config)
        await poll(lambda: rig.run_status(run) in ENDED_RUN, within=20)
        assert rig.run_status(run) == "succeeded", second.output()
        assert (rig.output(run), rig.output(run, "stderr")) == (b"out\n", b"err\n")
        await poll(lambda: not marks(rig.journal_path) and not launch.exists() and not run_dir.exists(), within=20)
        await stop(second)
