"""Start failures and forced stops that explain themselves, end to end (docs/decisions/0025-start-failures.md): a
real Worker process running as root refuses a plan without a user (`plan.root_not_allowed`); its log line, the
database, `qinglong run show` and `qinglong run logs` all say why and that nothing ran. A real task that ignores
SIGTERM is KILLed after the stop grace when its Run is cancelled, and the Worker, the database, `run show` and
`run logs` say `process.killed_after_grace`, not that it vanished.
Touches: a fresh database, the in-process shell on TLS 1.3 loopback, real Worker processes and their tasks, CLI
child processes, temporary folders.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cli.test_cli import acli
from tests.integration.worker.conftest import ENDED_RUN, Rig, child_subreaper, poll, status_file
from tests.integration.worker.test_run_logs import _api

pytestmark = pytest.mark.db

ROOT_REFUSAL = "plan.root_not_allowed: the plan names no user and this Worker does not run tasks as root"
NOTHING_RAN = "attempt 1 failed before its task started (nothing ran)"


def moves(log: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.splitlines() if '"record.state"' in line]


@pytest.mark.skipif(os.geteuid() != 0, reason="a Worker running as root")
async def test_a_root_worker_s_refusal_says_why_everywhere(rig: Rig, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    run = rig.add_run({"argv": ["touch", str(marker)], "maxAttempts": 1})
    with child_subreaper():
        worker = rig.start_worker_process(rig.write_config(tick_seconds=0.2, extra=["run_as = []"]))
        await poll(lambda: rig.run_status(run) in ENDED_RUN, within=20, every=0.05)
        await poll(lambda: rig.state() == "completed", within=10)
        worker.popen.send_signal(signal.SIGTERM)
        assert await worker.wait(10) == 0, worker.output()
    assert not marker.exists(), "the task ran"

    # The Worker's log line: the code and, as the reason, the message.
    [failed] = [m for m in moves(worker.output()) if m["to"] == "start_failed"]
    assert failed["error"] == "plan.root_not_allowed", failed
    assert failed["reason"] is not None and ROOT_REFUSAL.split(": ", 1)[1] in failed["reason"], failed

    # The database: the Attempt's code and message.
    [attempt] = rig.attempts(run)
    message = rig.one("select error_message from ql.run_attempts where run_id = %s", (run,))
    ended = (rig.run_status(run), attempt["status"], attempt["error_code"])
    assert ended == ("failed", "failed", "plan.root_not_allowed"), ended
    assert message == failed["reason"] and message.startswith(ROOT_REFUSAL.split(": ", 1)[1]), message

    # run show: a line saying why, and that nothing ran.
    shown = await acli("run", "show", *_api(rig, tmp_path), "--run", run)
    assert shown.code == 0, shown
    assert f"  why: {NOTHING_RAN}: {ROOT_REFUSAL}" in shown.stdout, shown.stdout

    # run logs: no output, one marked line on stderr; exit 0 (the outcome only with --follow: failed, 1).
    logs = await acli("run", "logs", *_api(rig, tmp_path), "--run", run)
    assert (logs.code, logs.stdout) == (0, ""), logs
    assert logs.stderr.startswith(f"[qinglong: {NOTHING_RAN}: {ROOT_REFUSAL}") and logs.stderr.count("\n") == 1, logs
    followed = await acli("run", "logs", *_api(rig, tmp_path), "--run", run, "--follow")
    assert (followed.code, followed.stdout, followed.stderr) == (1, "", logs.stderr), followed
    as_json = await acli("run", "logs", *_api(rig, tmp_path), "--run", run, "--json")
    assert as_json.code == 0 and as_json.stderr == "", as_json
    assert json.loads(as_json.stdout)["attempt"]["errorCode"] == "plan.root_not_allowed"


async def test_a_task_that_ignores_sigterm_is_reported_killed_after_the_grace(rig: Rig, tmp_path: Path) -> None:
    """The config's stop grace is 1 s (Rig.write_config). The whole group ignores TERM (a trap is inherited)."""
    rig.set_lease_ttl(4000)
    script = 'trap "" TERM; echo ready; while true; do sleep 0.1; done'
    run = rig.add_run({"argv": ["sh", "-c", script], "maxAttempts": 1})
    with child_subreaper():
        worker = rig.start_worker_process(rig.write_config(tick_seconds=0.2))
        await poll(lambda: rig.output(run) == b"ready\n", within=30, every=0.1)
        handle = rig.record().handle
        assert handle is not None
        cancelled = await acli("run", "cancel", *_api(rig, tmp_path), "--run", run)
        assert cancelled.code == 0, cancelled
        asked = time.monotonic()
        await poll(lambda: rig.run_status(run) in ENDED_RUN, within=30, every=0.05)
        took = time.monotonic() - asked
        await poll(lambda: rig.state() == "completed", within=10)
        worker.popen.send_signal(signal.SIGTERM)
        assert await worker.wait(10) == 0, worker.output()
    assert took >= 1.0, f"the Run ended {took:.2f} s after the cancel: before the grace was over"

    # The runner recorded the task's end: KILLed (the runner itself was not).
    assert status_file(handle) == {"exitCode": None, "signal": signal.SIGKILL}
    # The Worker: one line when it KILLed the task, and the completion's code.
    log = worker.output()
    killed = [json.loads(line) for line in log.splitlines() if '"task.killed_after_grace"' in line]
    assert [k["run"] for k in killed] == [run], log
    pending = [m for m in moves(log) if m["to"] == "completion_pending"]
    assert [m["error"] for m in pending] == ["process.killed_after_grace"], pending
    # The database: cancelled (the intent wins), with the code that says how.
    [attempt] = rig.attempts(run)
    assert (rig.run_status(run), attempt["status"], attempt["error_code"]) == (
        "cancelled", "cancelled", "process.killed_after_grace"
    )  # fmt: skip
    why = "attempt 1 cancelled: process.killed_after_grace: the task ignored its stop signal (SIGTERM) and was killed"
    shown = await acli("run", "show", *_api(rig, tmp_path), "--run", run)
    assert shown.code == 0 and f"  why: {why}" in shown.stdout, shown
    logs = await acli("run", "logs", *_api(rig, tmp_path), "--run", run)
    assert (logs.code, logs.stdout) == (0, "ready\n"), logs
    assert logs.stderr.startswith(f"[qinglong: {why}") and logs.stderr.count("\n") == 1, logs
    followed = await acli("run", "logs", *_api(rig, tmp_path), "--run", run, "--follow")
    assert (followed.code, followed.stdout, followed.stderr) == (4, "ready\n", logs.stderr), followed
