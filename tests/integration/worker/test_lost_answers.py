"""A lost answer never stops, repeats or strands a task (docs/decisions/0004):
answers cut after the database committed (the shell's own middleware aborts the connection), a
cancel accepted before the start, a Worker frozen or killed past its Lease (the runner's dead-man's
switch), and a restart in the middle of a launch (recovered from the launch's evidence).
Touches: a fresh database, the in-process shell on TLS 1.3 loopback, real task processes, Worker
processes (this process is their child subreaper meanwhile), the journal.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess

import pytest

from qinglong.wire import LeaseControlRequest, LeaseRenewed, OfferOffered
from qinglong.worker.client import Refused, TransportError
from qinglong.worker.executor import Executor
from qinglong.worker.identity import boottime_ns
from qinglong.worker.journal import Journal, JournalError
from tests.integration.db.factories import duplicate_events, stream_faults
from tests.integration.worker.conftest import (
    ENDED_RUN,
    Call,
    Rig,
    child_subreaper,
    only_record,
    poll,
    read_journal,
    running,
    status_file,
)

pytestmark = pytest.mark.db


def _events_ok(rig: Rig, run: str) -> None:
    """Every Run's events contiguous from 1, no duplicated event, no event type twice in this Run."""
    assert stream_faults(rig.conn) == [] and duplicate_events(rig.conn) == (0, 0)
    types = [t for t, _, _ in rig.events(run)]
    assert len(types) == len(set(types)), types


async def test_a_renewal_answer_lost_before_an_exit_0_completes_once_without_a_rerun(rig: Rig) -> None:
    rig.set_lease_ttl(5000)
    run = rig.add_run({"argv": ["sh", "-c", "sleep 1"], "maxAttempts": 1})
    client = rig.client()
    lc = rig.lifecycle(client)
    await lc.start()
    rig.served.lose["lease-control"] = 1  # the first renewal commits; its answer is cut
    await rig.tick_until(lc, lambda: rig.served.lost == ["lease-control"])
    assert isinstance(client.named("lease-control")[0].error, TransportError)
    assert rig.lease_version(run) == 2 and rig.record().lease_version == 1, "committed, not journaled"
    handle = rig.record().handle
    assert handle is not None
    await poll(lambda: status_file(handle) is not None, within=10)  # the task exits 0 meanwhile

    await rig.tick_until(lc, lambda: rig.run_status(run) in ENDED_RUN)
    assert rig.run_status(run) == "succeeded"
    completions = client.named("completion")
    assert isinstance(completions[0].error, Refused) and completions[0].error.code == "fenced.stale_version"
    replay = next(c for c in client.named("lease-control") if c.started_ns > completions[0].started_ns)
    assert isinstance(replay.result, LeaseRenewed) and replay.result.lease_version == 2
    assert completions[-1].error is None and len(completions) == 2
    [attempt] = rig.attempts(run)
    assert (attempt["status"], attempt["exit_code"]) == ("succeeded", 0)
    assert rig.record().state == "completed"
    _events_ok(rig, run)


# Found by the chaos run: the answer of the lease-control replay that a fenced completion sends is
# lost too. The record must stay completion_pending (and complete next tick), not be isolated.
async def test_a_lost_replay_answer_during_completion_still_completes_the_exit_0(rig: Rig) -> None:
    rig.set_lease_ttl(5000)
    run = rig.add_run({"argv": ["sh", "-c", "sleep 1"], "maxAttempts": 1})
    client = rig.client()
    lc = rig.lifecycle(client)
    await lc.start()
    rig.served.lose["lease-control"] = 1  # the first renewal commits; its answer is cut
    await rig.tick_until(lc, lambda: rig.served.lost == ["lease-control"])
    handle = rig.record().handle
    assert handle is not None
    await poll(lambda: status_file(handle) is not None, within=10)  # the task exits 0 meanwhile
    rig.served.lose["lease-control"] = 1  # the replay the completion sends loses its answer too
    await rig.tick_until(lc, lambda: rig.served.lost == ["lease-control"] * 2 or rig.run_status(run) in ENDED_RUN)
    assert rig.record().state != "control_plane_terminal", rig.record().data.get("reason")
    await rig.tick_until(lc, lambda: rig.run_status(run) in ENDED_RUN)
    assert rig.run_status(run) == "succeeded"


async def test_renewal_answers_lost_while_the_task_runs_never_stop_it(rig: Rig) -> None:
    rig.set_lease_ttl(4000)
    run = rig.add_run({"argv": ["sh", "-c", "sleep 3"], "maxAttempts": 1})
    client = rig.client()
    lc = rig.lifecycle(client)
    await lc.start()
    await rig.tick_until(lc, lambda: rig.state() == "running_acknowledged")
    handle = rig.record().handle
    assert handle is not None
    rig.served.lose["lease-control"] = 2  # two renewals in a row commit and lose their answers
    await rig.tick_until(lc, lambda: rig.run_status(run) in ENDED_RUN, every=0.4)
    assert rig.served.lost == ["lease-control", "lease-control"]
    assert rig.run_status(run) == "succeeded"
    assert status_file(handle) == {"exitCode": 0, "signal": None}, "a lost answer stopped a healthy task"
    refused = [c for c in client.calls if isinstance(c.error, Refused)]
    assert refused == [], [(c.name, c.error) for c in refused]
    assert len(rig.attempts(run)) == 1
    _events_ok(rig, run)


async def test_a_lost_pull_answer_is_replayed_to_the_same_offer_never_a_second_claim(rig: Rig) -> None:
    first, second = rig.add_runs({"argv": ["true"], "maxAttempts": 1}, 2)
    client = rig.client()
    lc = rig.lifecycle(client)
    await lc.start()
    rig.served.lose["pull"] = 1  # the first pull claims `first`; its answer is cut
    await rig.tick_until(lc, lambda: rig.run_status(first) in ENDED_RUN)
    assert rig.served.lost == ["pull"]
    lost, replayed = client.named("pull")[:2]
    assert isinstance(lost.error, TransportError)
    assert isinstance(replayed.result, OfferOffered) and replayed.result.offer.run_id == first, "a second claim"
    assert rig.run_status(first) == "succeeded" and len(rig.attempts(first)) == 1
    # `second` waits for the slot `first` frees; the tick that ends `first` may already pull and run it (once).
    assert len(rig.attempts(second)) <= 1
    conn = sqlite3.connect(f"file:{rig.journal_path}?mode=ro", uri=True)
    try:
        assert conn.execute("select count(*) from meta").fetchone() == (0,), "the answered pull id is still pending"
    finally:
        conn.close()
    _events_ok(rig, first)


@pytest.mark.parametrize("after", ["pull", "starting"])
async def test_a_cancel_accepted_before_the_start_spawns_nothing(rig: Rig, after: str) -> None:
    """The intent is written right after the pull's answer (the Attempt is claimed) or right after the
    first starting ACK (the replay just before the spawn sees it): either way nothing is spawned."""
    run = rig.add_run({"argv": ["sh", "-c", "echo must-not-run"]})
    client = rig.client()
    written: list[Call] = []

    def cancel(call: Call) -> None:
        if call.name == after and not written:
            written.append(call)
            rig.one("select ql.run_cancel_intent(%s, 'user', 'user', null, ql.now_ms())", (run,))

    client.on_answer = cancel
    lc = rig.lifecycle(client)
    await lc.start()
    await rig.tick_until(lc, lambda: rig.state() == "completed")
    assert written, "the cancel was never injected"
    assert rig.run_status(run) == "cancelled"
    [attempt] = rig.rows(
        "select status::text, error_code, started_at_ms is null from ql.run_attempts where run_id = %s", (run,)
    )
    assert attempt == ("cancelled", "start.cancelled", after == "pull")
    record = rig.record()
    assert record.handle is None and record.data["launch_nonce"] is None
    assert not (rig.work_dir / record.offer_id).exists(), "a launch folder exists: something was spawned"
    assert record.data["reason"] == "not started: user intent"
    _events_ok(rig, run)


@pytest.mark.parametrize("fault", ["SIGSTOP", "SIGKILL"])
async def test_a_frozen_or_dead_worker_cannot_let_its_task_outlive_the_lease(rig: Rig, fault: str) -> None:
    ttl_ms, grace_s = 3000, 1.0
    rig.set_lease_ttl(ttl_ms)
    run = rig.add_run({"argv": ["sleep", "60"]})
    config = rig.write_config(tick_seconds=0.5)  # stop_grace_seconds = 1.0
    with child_subreaper():
        worker = rig.start_worker_process(config)

        def renewed() -> bool:
            record = only_record(rig.journal_path)
            return record is not None and record.state == "running_acknowledged" and record.lease_version >= 3

        await poll(renewed, within=20)
        worker.popen.send_signal(getattr(signal, fault))
        await asyncio.sleep(0.3)  # a renewal in flight lands in the journal or not at all
        record = rig.record()
        handle, local_expiry = record.handle, record.lease_expires_ns
        assert handle is not None and local_expiry is not None
        db_expiry_ms = int(rig.one("select expires_at_ms from ql.run_leases l join ql.run_attempts a "
                                   "on a.id = l.attempt_id where a.run_id = %s", (run,)))  # fmt: skip
        db_left_s = (db_expiry_ms - rig.db_now_ms()) / 1000
        await poll(lambda: not running(handle.pid, handle.start_time), within=ttl_ms / 1000 + grace_s + 5, every=0.05)
        stopped_at = boottime_ns()
        lag_s = (stopped_at - local_expiry) / 1e9
        assert lag_s <= grace_s + 1.0, f"the task outlived its local expiry by {lag_s:.2f} s"
        assert status_file(handle) == {"exitCode": None, "signal": signal.SIGTERM}
        stderr = Executor.output_path(handle, "stderr")  # the runner's own lines go to the task's stderr
        assert b"the Lease expired locally" in await asyncio.to_thread(stderr.read_bytes)
        # The database's expiry is later than the local one: nothing of this Attempt runs past it.
        assert (stopped_at - local_expiry) / 1e9 <= db_left_s + grace_s + 1.0
        assert rig.run_status(run) == "running"  # the database decides the rest (lost, retry) by itself
        if fault == "SIGSTOP":
            worker.popen.send_signal(signal.SIGKILL)
        worker.kill()


def _rewrite(rig: Rig, state: str, **changes: object) -> None:
    """Rewrite the one journal record as a crash would have left it (cas never moves backwards)."""
    conn = sqlite3.connect(rig.journal_path)
    try:
        with conn:
            data = json.loads(conn.execute("select data from inbox").fetchone()[0])
            data.update(changes)
            text = json.dumps(data, sort_keys=True, separators=(",", ":"))
            conn.execute("update inbox set state = ?, data = ?", (state, text))
    finally:
        conn.close()


async def test_a_worker_back_between_its_starting_ack_and_the_spawn_renews_first_so_a_lost_answer_stops_nothing(
    rig: Rig,
) -> None:
    """A Worker killed between its starting ACK and the spawn comes back with little of the offer's Lease left
    (here 0.15 s of 30, less than a tick). Spawned on that, one lost renewal answer would let the local Lease
    run out and the runner's switch would stop a healthy task (the chaos test saw it). It renews first; the
    answer is lost and the local Lease runs out meanwhile, but with no process yet the database decides: the
    next tick's renewal (a replay) is answered, and the task runs to its exit 0 on that Lease."""
    run = rig.add_run({"argv": ["sh", "-c", "sleep 1"], "maxAttempts": 1})
    client = rig.client()

    def lose_the_replay(call: Call) -> None:  # the starting ACK is answered, the replay before the spawn is not
        if call.name == "starting" and len(client.named("starting")) == 1:
            rig.served.lose["starting"] = 1

    client.on_answer = lose_the_replay
    lc = rig.lifecycle(client)
    await lc.start()
    await rig.tick_until(lc, lambda: rig.served.lost == ["starting"])
    assert rig.state() == "starting_acknowledged" and rig.record().handle is None
    await lc.stop()
    _rewrite(rig, "starting_acknowledged", lease_expires_boottime_ns=boottime_ns() + 150_000_000)

    spy = rig.client()
    again = rig.lifecycle(spy)
    rig.served.lose["lease-control"] = 1  # the renewal before the spawn commits; its answer is cut
    await again.start()  # it scans its journal and takes the record on as far as it can
    await asyncio.sleep(0.3)  # a tick's wait: the 0.15 s of local Lease run out meanwhile
    await rig.tick_until(again, lambda: rig.run_status(run) in ENDED_RUN, every=0.3)
    assert rig.served.lost == ["starting", "lease-control"]
    handle = rig.record().handle
    assert handle is not None
    assert status_file(handle) == {"exitCode": 0, "signal": None}, "a lost answer stopped a healthy task"
    assert rig.run_status(run) == "succeeded" and len(rig.attempts(run)) == 1
    # the first answered renewal is the one before the spawn: a renewal after it takes the running ACK along
    renewals = [c.body for c in spy.calls if c.name == "lease-control" and c.error is None]
    assert isinstance(renewals[0], LeaseControlRequest) and renewals[0].running is None, "spawned before a renewal"
    assert any(isinstance(b, LeaseControlRequest) and b.running for b in renewals), "no renewal said running"
    assert not [c for c in spy.calls if isinstance(c.error, Refused)]
    _events_ok(rig, run)


async def test_a_restart_mid_launch_adopts_the_spawned_task_from_its_evidence(rig: Rig) -> None:
    rig.set_lease_ttl(5000)
    run = rig.add_run({"argv": ["sh", "-c", "sleep 2; exit 4"], "maxAttempts": 1})
    lc = rig.lifecycle()
    await lc.start()
    await rig.tick_until(lc, lambda: rig.state() == "running_acknowledged")
    handle = rig.record().handle
    assert handle is not None
    await lc.stop()
    _rewrite(rig, "launching", handle=None)  # a crash right after the spawn: the handle was never journaled

    again = rig.lifecycle()
    await again.start()
    record = rig.record()
    assert record.handle == handle, f"not adopted: {record.state} {record.data.get('reason')}"
    assert not again.failed_closed
    await rig.tick_until(again, lambda: rig.run_status(run) in ENDED_RUN)
    [attempt] = rig.attempts(run)
    assert (attempt["status"], attempt["exit_code"]) == ("failed", 4)
    assert status_file(handle) == {"exitCode": 4, "signal": None}
    _events_ok(rig, run)


async def test_a_restart_mid_launch_before_the_spawn_reports_a_start_that_never_ran(rig: Rig) -> None:
    rig.set_lease_ttl(5000)
    run = rig.add_run({"argv": ["sleep", "30"], "maxAttempts": 1})
    client = rig.client()
    lc = rig.lifecycle(client)
    await lc.start()
    await rig.tick_until(lc, lambda: rig.state() == "running_acknowledged")
    handle = rig.record().handle
    assert handle is not None
    await lc.stop()
    # A crash after `launching` was journaled with a fresh nonce, before that nonce's log existed.
    nonce = "0" * 32
    log, _ = Executor(rig.work_dir).paths(rig.record().offer_id, nonce)
    assert not log.exists()
    _rewrite(rig, "launching", handle=None, launch_nonce=nonce)

    spy = rig.client()
    again = rig.lifecycle(spy)
    await again.start()
    record = rig.record()
    assert record.data["error_code"] == "launch.never_started", record.data.get("reason")
    assert not again.failed_closed, "provable evidence must not fail the Worker closed"
    # The database hears the start failure; the Attempt is `running` there (this journal was rewritten
    # under it), so it is fenced and the record is isolated: the Run is the database's to recover.
    [failure] = spy.named("start-failure")
    assert isinstance(failure.error, Refused) and failure.error.code == "fenced.state_drift"
    assert record.state == "control_plane_terminal"
    assert rig.run_status(run) == "running"
    # The first launch's task is now nobody's: its own dead-man's switch stops it at its Lease.
    await poll(lambda: not running(handle.pid, handle.start_time), within=5 + 1 + 3, every=0.05)
    assert status_file(handle) == {"exitCode": None, "signal": signal.SIGTERM}


async def test_a_journal_deleted_under_a_running_worker_fails_closed_and_the_task_stops_at_its_lease(
    rig: Rig,
) -> None:
    rig.set_lease_ttl(3000)
    run = rig.add_run({"argv": ["sleep", "60"]})
    client = rig.client()
    lc = rig.lifecycle(client)
    await lc.start()
    await rig.tick_until(lc, lambda: rig.state() == "running_acknowledged" and rig.record().lease_version >= 2)
    record = rig.record()
    handle, local_expiry = record.handle, record.lease_expires_ns
    assert handle is not None and local_expiry is not None
    rig.journal_path.unlink()  # an operator's mistake, or a disk cleaner
    calls = len(client.calls)
    await lc.tick()
    assert lc.failed_closed
    assert client.calls[calls:] == [], "a Worker without its journal still called the control plane"
    await poll(lambda: not running(handle.pid, handle.start_time), within=3 + 1 + 3, every=0.05)
    assert (boottime_ns() - local_expiry) / 1e9 <= 1.0 + 1.0, "the task outlived its local expiry"
    assert status_file(handle) == {"exitCode": None, "signal": signal.SIGTERM}
    assert rig.run_status(run) == "running"  # the database recovers it (lost, retried) by itself


async def test_a_journal_deleted_between_the_pull_and_the_spawn_starts_nothing(rig: Rig) -> None:
    """The journal is deleted right after a pull's answer arrived (within the tick, after its check): the offer
    is written to the deleted file, and nothing is started on it (no starting ACK, no launch). The claim is the
    database's to abandon; a restart with a fresh journal would know nothing of a task (the chaos test saw one
    run to its exit 0 unreported, and its only try counted lost)."""
    run = rig.add_run({"argv": ["sh", "-c", "echo must-not-run"], "maxAttempts": 1})
    client = rig.client()

    def delete_journal(call: Call) -> None:
        if call.name == "pull" and isinstance(call.result, OfferOffered):
            rig.journal_path.unlink()

    client.on_answer = delete_journal
    lc = rig.lifecycle(client)
    await lc.start()
    await rig.tick_until(lc, lambda: lc.failed_closed)
    assert [c.name for c in client.calls if c.name in ("starting", "running")] == []
    assert not rig.work_dir.exists() or not any(rig.work_dir.iterdir()), "a launch folder exists: something started"
    [attempt] = rig.attempts(run)
    assert attempt["status"] == "claimed"


async def test_a_full_disk_loses_one_journal_write_and_the_restarted_worker_replays_the_renewal(rig: Rig) -> None:
    """The renewal commits in the database, the journal cannot record it (ENOSPC, a real tmpfs), the
    Worker stops with a journal error; restarted with space again, it replays the renewal and the
    healthy task runs to its exit 0."""
    rig.set_lease_ttl(6000)
    folder = rig.journal_path.parent
    folder.mkdir(parents=True, exist_ok=True)
    mount = ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(folder)]
    await asyncio.to_thread(subprocess.run, mount, check=True)
    try:
        run = rig.add_run({"argv": ["sh", "-c", "sleep 3"], "maxAttempts": 1})
        lc = rig.lifecycle()
        await lc.start()
        await rig.tick_until(lc, lambda: rig.state() == "running_acknowledged" and rig.record().lease_version >= 2)
        handle = rig.record().handle
        assert handle is not None
        journaled = rig.record().lease_version
        lease_file = Executor.lease_path(handle).read_text()
        filler = folder / "filler"
        with pytest.raises(OSError, match="No space left"), filler.open("wb") as f:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        with pytest.raises(JournalError, match="full"):
            await lc.tick()
        assert rig.lease_version(run) == journaled + 1, "the renewal committed in the database"
        assert rig.record().lease_version == journaled, "and is not in the journal"
        assert Executor.lease_path(handle).read_text() == lease_file, "the switch keeps the persisted expiry"
        await lc.stop()
        filler.unlink()

        again = rig.lifecycle()
        await again.start()
        await rig.tick_until(again, lambda: rig.run_status(run) in ENDED_RUN)
        assert rig.run_status(run) == "succeeded"
        assert status_file(handle) == {"exitCode": 0, "signal": None}, "the healthy task was stopped"
        assert len(rig.attempts(run)) == 1
        _events_ok(rig, run)
        await again.stop()
    finally:
        await asyncio.to_thread(subprocess.run, ["umount", "-l", str(folder)], check=False)


async def test_ended_records_never_delay_a_renewal_however_many_the_journal_keeps(rig: Rig) -> None:
    """Found by the chaos run: a tick paged every record, ended ones included, so with a few hundred
    ended records an active one was renewed only every dozen ticks and its Lease ran out."""
    rig.set_lease_ttl(3000)
    with Journal.open(rig.journal_path) as journal:
        for i in range(200):
            journal.insert(f"ended-{i}", "completed", {"kept": i})
    run = rig.add_run({"argv": ["sleep", "30"]})
    client = rig.client()
    lc = rig.lifecycle(client, page_size=16)
    await lc.start()

    def running_acked() -> bool:
        return any(
            r.state == "running_acknowledged" for r in read_journal(rig.journal_path) if r.offer_id[:6] != "ended-"
        )

    await rig.tick_until(lc, running_acked)
    assert rig.run_status(run) == "running"
    before = len(client.named("lease-control"))
    for _ in range(10):
        await lc.tick()
    renewals = [c for c in client.named("lease-control")[before:] if c.error is None]
    assert len(renewals) == 10, f"{len(renewals)} renewals in 10 ticks"
