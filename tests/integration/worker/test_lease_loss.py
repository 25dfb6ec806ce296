"""Lease loss on the Worker's side (docs/architecture.md §7, decision 0000 (ADR-0118 §4 item 3)): when the
control plane stays unreachable past the conservative local expiry (CLOCK_BOOTTIME from the instant the
renewal was sent), the Worker stops its process locally and never calls the control plane for it again; when
the durable handle's pid now belongs to another process, nothing is signalled and the record says
`unverified`.
Touches: a fresh database, the in-process shell on TLS 1.3 loopback (stopped mid-test), real task processes
and one unrelated stand-in process, the journal (mutated by the test while no Worker owns it).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

import pytest

from qinglong.worker.identity import ProcessHandle, boottime_ns
from qinglong.worker.journal import Journal
from tests.integration.worker.conftest import (
    ENDED_RUN,
    Rig,
    child_subreaper,
    group_members,
    kill_handle,
    poll,
    proc_stat,
    running,
    status_file,
)

pytestmark = pytest.mark.db

LEASE_TTL_MS = 3000

# A process that has nothing to do with the Worker: it records every catchable stop signal it gets.
UNRELATED = """
import pathlib, signal, sys, time
marker = pathlib.Path(sys.argv[1])
def record(signum, frame):
    with marker.open("a") as f:
        f.write(f"{signum}\\n")
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, record)
marker.write_text("")
while True:
    time.sleep(0.2)
"""


async def test_an_unreachable_control_plane_past_the_lease_stops_the_process_locally_and_calls_nothing(
    rig: Rig,
) -> None:
    rig.set_lease_ttl(LEASE_TTL_MS)
    run = rig.add_run({"argv": ["sleep", "30"]})
    client = rig.client()
    lc = rig.lifecycle(client)
    await lc.start()
    await rig.tick_until(
        lc, lambda: rig.state() == "running_acknowledged" and rig.record().lease_expires_ns is not None
    )
    handle = rig.record().handle
    assert handle is not None
    pulls = lc.pulls

    await rig.served.stop_worker_ingress()
    seen = len(rig.served.seen)
    ticks: list[tuple[int, str | None]] = []  # (when the tick ended, the record's state after it)
    deadline = time.monotonic() + 4 * LEASE_TTL_MS / 1000
    while rig.state() == "running_acknowledged":
        assert time.monotonic() < deadline, "the local expiry never stopped the process"
        await lc.tick()
        ticks.append((boottime_ns(), rig.state()))
        await asyncio.sleep(0.1)
    for _ in range(3):  # and afterwards: nothing more
        await lc.tick()
        await asyncio.sleep(0.05)

    record = rig.record()
    expiry = record.lease_expires_ns
    assert expiry is not None
    assert record.state == "lease_lost_local_execution_stopped"
    # The Worker's own stop and the runner's dead-man's switch act at the same local expiry: either
    # may be first, so the Worker finds the task stopped by itself or already exited.
    assert record.data["reason"] in ("local lease expired: stopped", "local lease expired: already_exited")

    # The expiry is conservative: the TTL the database granted, counted from the instant the renewal was sent.
    last_renewal = [c for c in client.named("lease-control") if c.error is None][-1]
    assert expiry - LEASE_TTL_MS * 1_000_000 <= last_renewal.started_ns
    assert last_renewal.started_ns - (expiry - LEASE_TTL_MS * 1_000_000) < 500_000_000

    # Nothing stopped the process before its local expiry; the first tick past it did.
    assert all(state == "running_acknowledged" for ended, state in ticks if ended < expiry)
    assert ticks[-1][0] >= expiry
    assert not running(handle.pid, handle.start_time)
    assert status_file(handle) == {"exitCode": None, "signal": 15}

    # Not one lease-control request for this offer was attempted after the local expiry; nothing reached
    # the server after it stopped; the Worker wrote no state of its own to the control plane.
    late = [c for c in client.named("lease-control") if c.started_ns >= expiry]
    assert late == []
    assert all(c.body.offer_id == record.offer_id for c in client.named("lease-control"))  # type: ignore[union-attr]
    assert len(rig.served.seen) == seen
    assert lc.pulls == pulls
    [attempt] = rig.attempts(run)
    assert attempt["status"] == "running"


async def test_a_pid_now_owned_by_another_process_is_unverified_and_never_signalled(rig: Rig) -> None:
    rig.set_lease_ttl(2000)
    rig.add_run({"argv": ["sleep", "30"]})
    lc = rig.lifecycle()
    await lc.start()
    await rig.tick_until(
        lc, lambda: rig.state() == "running_acknowledged" and rig.record().lease_expires_ns is not None
    )
    await lc.stop()  # the Worker goes away; its task keeps running

    record = rig.record()
    original = record.handle
    assert original is not None
    rig.handles.append(original)
    kill_handle(original)  # the task and its wrapper end without a status (as in a crash) and the pid is free
    assert status_file(original) is None

    marker = rig.root / "unrelated.signals"
    other = rig.spawn_other([sys.executable, "-c", UNRELATED, str(marker)])
    await poll(marker.exists, within=10)
    other_stat = proc_stat(other.pid)
    assert other_stat is not None and other_stat.start_time != original.start_time

    # The kernel handed the pid to an unrelated process: the durable handle now names it, with the
    # start time of the process the Worker launched.
    reused = ProcessHandle(
        pid=other.pid,
        pgid=other.pid,
        start_time=original.start_time,
        boot_id=original.boot_id,
        log_path=original.log_path,
        status_path=original.status_path,
        launch_nonce=original.launch_nonce,
    )
    with Journal.open(rig.journal_path) as journal:
        current = journal.get(record.offer_id)
        assert current is not None and current.state == "running_acknowledged"
        journal.cas(
            current.offer_id, current.revision, state=current.state, data={**current.data, "handle": reused.to_dict()}
        )

    # The Worker stays down past its local lease expiry, then starts again and must stop "its" process.
    expiry = record.lease_expires_ns
    assert expiry is not None
    await poll(lambda: boottime_ns() > expiry, within=10)
    client = rig.client()
    restarted = rig.lifecycle(client)
    await restarted.start()

    # Never signal an unproven identity: the unrelated process lives on and got no signal.
    assert running(other.pid, other_stat.start_time), "the unrelated process was killed"
    await asyncio.sleep(0.3)
    assert marker.read_text() == "", "the unrelated process got a signal"

    # The local Lease had expired, so the control plane is not called; the record says what is known.
    after = rig.record()
    calls = [(c.name, c.error) for c in client.calls if c.name in ("lease-control", "output", "completion")]
    assert (after.state, after.data.get("reason"), calls) == (
        "lease_lost_local_execution_unverified",
        "local lease expired: unverified",
        [],
    )


async def test_a_task_whose_wrapper_was_killed_alone_is_not_reported_ended_while_it_still_runs(rig: Rig) -> None:
    rig.set_lease_ttl(LEASE_TTL_MS)
    run = rig.add_run({"argv": ["sh", "-c", "sleep 30; echo never"]})
    with child_subreaper():  # the orphaned task becomes our child, so it can be reaped after the test
        lc = rig.lifecycle()
        await lc.start()
        await rig.tick_until(lc, lambda: rig.state() == "running_acknowledged")
        handle = rig.record().handle
        assert handle is not None
        await poll(lambda: len(group_members(handle.pgid)) >= 2, within=5)  # the wrapper and its task
        os.kill(handle.pid, signal.SIGKILL)  # only the wrapper: its task keeps running in the group
        await poll(lambda: not running(handle.pid, handle.start_time), within=5)
        assert group_members(handle.pgid), "the task ended with its wrapper"

        ended_with_live_group: list[tuple[str, list[int]]] = []
        for _ in range(8):
            await lc.tick()
            members = group_members(handle.pgid)
            status = rig.run_status(run)
            if status in ENDED_RUN and members:
                ended_with_live_group.append((status, members))
            await asyncio.sleep(0.1)
    assert ended_with_live_group == [], (
        "the Attempt was reported ended while its task still runs in the process group "
        f"({ended_with_live_group[0]}, attempt {rig.attempts(run)[0]})"
    )
