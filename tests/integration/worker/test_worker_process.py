"""`qinglong-worker run` as its own OS process (docs/architecture.md §7, decision 0000 (ADR-0112 §3)): a
Worker killed with SIGKILL while its task runs adopts the still-running process when restarted and completes
the Run with the task's real exit code; SIGTERM stops it in order within its shutdown budget and releases the
journal.
Touches: a fresh database, the in-process shell on TLS 1.3 loopback, Worker processes and their task processes
(this process is their child subreaper meanwhile), the journal (read-only while owned).
"""

from __future__ import annotations

import asyncio
import json
import signal
import time

import pytest

from qinglong.worker.journal import Journal, JournalBusy
from tests.integration.worker.conftest import (
    ENDED_RUN,
    Rig,
    child_subreaper,
    only_record,
    poll,
    running,
    status_file,
)

pytestmark = pytest.mark.db


async def test_a_worker_killed_mid_run_adopts_the_running_task_after_restart_and_reports_its_real_exit_code(
    rig: Rig,
) -> None:
    rig.set_lease_ttl(10000)
    run = rig.add_run({"argv": ["sh", "-c", "sleep 3; exit 7"], "maxAttempts": 1})
    config = rig.write_config(tick_seconds=1.0)
    with child_subreaper():
        first = rig.start_worker_process(config)

        def renewed_and_persisted() -> bool:
            record = only_record(rig.journal_path)
            return (
                record is not None
                and record.state == "running_acknowledged"
                and record.lease_expires_ns is not None
                and record.lease_version == rig.lease_version(run)
            )

        # Kill it just after a renewal was persisted, so no lease control is in flight (tick = 1 s).
        await poll(renewed_and_persisted, within=20)
        first.popen.send_signal(signal.SIGKILL)
        assert await first.wait(5) == -signal.SIGKILL

        before = rig.record()
        handle = before.handle
        assert handle is not None
        assert running(handle.pid, handle.start_time), "the task did not survive its Worker"
        assert status_file(handle) is None
        assert rig.run_status(run) == "running"

        second = rig.start_worker_process(config)
        await poll(lambda: rig.run_status(run) in ENDED_RUN, within=20, every=0.05)
        assert rig.run_status(run) == "failed", second.output()
        await poll(lambda: rig.state() == "completed", within=5)

        second.popen.send_signal(signal.SIGTERM)
        assert await second.wait(10) == 0, second.output()

    [attempt] = rig.attempts(run)
    assert (attempt["attempt_no"], attempt["status"], attempt["exit_code"]) == (1, "failed", 7)
    events = [t for t, _, _ in rig.events(run)]
    assert events == [
        "run.queued",
        "attempt.starting",
        "attempt.failed",
        "run.failed",
    ]
    after = rig.record()
    assert after.offer_id == before.offer_id and after.handle == handle, "not the adopted process"
    assert after.data["exit_code"] == 7
    assert status_file(handle) == {"exitCode": 7, "signal": None}
    launches = sorted(p.name for p in (rig.work_dir / after.offer_id).iterdir())
    nonce = handle.launch_nonce
    assert launches == [
        f"{nonce}.err",
        f"{nonce}.identity.json",
        f"{nonce}.lease",
        f"{nonce}.log",
        f"{nonce}.status.json",
    ]


async def test_sigterm_stops_the_worker_in_order_within_its_shutdown_budget(rig: Rig) -> None:
    run = rig.add_run({"argv": ["sh", "-c", "echo hi"]})
    budget = 3.0
    config = rig.write_config(tick_seconds=0.2, shutdown_seconds=budget)
    with child_subreaper():
        worker = rig.start_worker_process(config)
        await poll(lambda: rig.run_status(run) in ENDED_RUN and rig.state() == "completed", within=20)
        assert rig.run_status(run) == "succeeded"
        with pytest.raises(JournalBusy):
            Journal.open(rig.journal_path)  # owned by the running Worker

        sent = time.monotonic()
        worker.popen.send_signal(signal.SIGTERM)
        code = await worker.wait(budget + 2)
        elapsed = time.monotonic() - sent
    assert code == 0, worker.output()
    assert elapsed < budget, f"stopped {elapsed:.2f} s after SIGTERM, over the {budget} s budget"
    with Journal.open(rig.journal_path) as journal:  # the lock is free again
        assert journal.count(states=["completed"]) == 1


async def test_sigterm_while_a_pull_is_in_flight_stops_within_the_shutdown_budget(rig: Rig) -> None:
    budget = 2.0
    config = rig.write_config(tick_seconds=0.2, shutdown_seconds=budget)
    rig.served.hold_pulls = True  # a slow control plane: the pull gets no answer for a long time
    with child_subreaper():
        worker = rig.start_worker_process(config)
        await asyncio.wait_for(rig.served.pull_arrived.wait(), 20)

        sent = time.monotonic()
        worker.popen.send_signal(signal.SIGTERM)
        code = await worker.wait(budget + 1)
        elapsed = time.monotonic() - sent
    assert code is not None, (
        f"still running {elapsed:.1f} s after SIGTERM (budget {budget} s): the in-flight pull was not aborted"
    )
    assert code == 0, worker.output()
    assert elapsed < budget, f"stopped {elapsed:.2f} s after SIGTERM, over the {budget} s budget"
    with Journal.open(rig.journal_path):
        pass


@pytest.mark.parametrize(
    ("change", "code", "says"),
    [
        (("generation = 1", "generation = 2"), 4, "refused this Worker (fenced.stale_generation)"),
        (('origin = "https://', 'origin = "http://'), 2, "origin: origin must be https://host[:port]"),
        (('key = "', 'key = "/nonexistent'), 2, "cannot read /nonexistent/"),  # a file it needs: no retry loop
    ],
)
async def test_a_worker_that_needs_an_operator_says_so_in_one_line_and_exits_with_its_code(
    rig: Rig, change: tuple[str, str], code: int, says: str
) -> None:
    run = rig.add_run({"argv": ["true"]})
    config = rig.write_config(tick_seconds=0.2)
    config.write_text(config.read_text().replace(*change, 1))
    with child_subreaper():
        worker = rig.start_worker_process(config)
        assert await worker.wait(15) == code, worker.output()
    output = worker.output()
    last = output.strip().splitlines()[-1]
    assert last.startswith("qinglong-worker: ") and says in last, output
    assert "Traceback" not in output
    for line in output.strip().splitlines()[:-1]:  # everything before the verdict is a JSON log line
        assert set(json.loads(line)) >= {"time", "level", "event"}, line
    assert rig.run_status(run) == "queued", "a refused Worker took work"


async def test_a_worker_says_it_started_and_when_it_loses_and_regains_the_control_plane(rig: Rig) -> None:
    """One line at start (its id, origin, capacity, work_dir), one when its session calls stop reaching the
    shell (two heartbeat answers cut after the shell ran them, as a dropped link would) and one when they reach
    it again, each naming the origin; not one line per failed call."""
    config = rig.write_config(tick_seconds=0.2)
    with child_subreaper():
        worker = rig.start_worker_process(config)
        await poll(lambda: "worker.started" in worker.output(), within=15)
        rig.served.lose["heartbeat"] = 2
        await poll(lambda: "control_plane.regained" in worker.output(), within=30)
        worker.popen.send_signal(signal.SIGTERM)
        assert await worker.wait(10) == 0, worker.output()
    lines = [json.loads(line) for line in worker.output().strip().splitlines()]
    [started] = [line for line in lines if line["event"] == "worker.started"]
    assert (started["worker_id"], started["origin"], started["capacity"]) == (
        rig.worker_id, rig.served.worker_url, 1,
    ), started  # fmt: skip
    assert started["work_dir"] == str(rig.work_dir)
    lost = [line for line in lines if line["event"] == "control_plane.lost"]
    regained = [line for line in lines if line["event"] == "control_plane.regained"]
    assert len(lost) == 1 and len(regained) == 1, worker.output()
    assert lost[0]["origin"] == regained[0]["origin"] == rig.served.worker_url
    assert regained[0]["outage_s"] >= 0
    assert rig.served.lost.count("heartbeat") == 2
