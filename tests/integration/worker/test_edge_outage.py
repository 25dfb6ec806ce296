"""A home link's outage under the pool's Lease (docs/decisions/0028-lease-length-per-pool.md): a Worker that loses
the control plane for less than its pool's Lease keeps its task running, and the output the task wrote meanwhile
arrives afterwards, complete; the Run ends as the task did, with one Attempt. The outage is longer than the global
Lease (which alone would have stopped the task) and than the session TTL (the Worker's session expires during it
and a new one carries on).

The suite's outage is 20 s under a 60 s Lease (and a 10 s session TTL). The full case of a home link, a 2-minute
outage under a 5-minute Lease with the default session TTL, is the same test given parameters (about 3 minutes):
`QL_OUTAGE_S=120 QL_OUTAGE_LEASE_MS=300000 QL_OUTAGE_SESSION_TTL_MS=120000 pytest <this file>`.

Touches: a fresh database, the in-process shell on TLS 1.3 loopback (its worker ingress stopped, then listening
again on the same port), a `qinglong-worker run` process and its task (this process is their child subreaper).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from qinglong.wire.output import Stream
from qinglong.worker.executor import Executor
from tests.integration.worker.conftest import ENDED_RUN, Rig, child_subreaper, only_record, poll, running

pytestmark = pytest.mark.db

OUTAGE_S = float(os.environ.get("QL_OUTAGE_S", "20"))
LEASE_MS = int(os.environ.get("QL_OUTAGE_LEASE_MS", "60000"))
SESSION_TTL_MS = int(os.environ.get("QL_OUTAGE_SESSION_TTL_MS", "10000"))
GLOBAL_LEASE_MS = 3000  # what every other pool gets: an outage of the suite's length would stop a task under it
STEP_S = 0.25  # the task prints a line to each stream every STEP_S


def task_plan(lines: int, step_s: float = STEP_S) -> dict[str, object]:
    script = f'i=0; while [ $i -lt {lines} ]; do i=$((i+1)); echo "out $i"; echo "err $i" >&2; sleep {step_s}; done'
    return {"argv": ["sh", "-c", script], "maxAttempts": 1}


def expected(prefix: str, lines: int) -> bytes:
    return "".join(f"{prefix} {i}\n" for i in range(1, lines + 1)).encode()


async def test_an_outage_shorter_than_the_pools_lease_keeps_the_task_and_its_output(rig: Rig) -> None:
    assert OUTAGE_S * 1000 < LEASE_MS - 10_000, "the outage must be shorter than the Lease, with room to renew"
    rig.set_lease_ttl(GLOBAL_LEASE_MS)
    rig.conn.execute("update ql.settings set session_ttl_ms = %s", (SESSION_TTL_MS,))
    answer = rig.one("select ql_api.pool_lease_set_v1('default', %s)", (LEASE_MS,))
    assert answer["status"] == "set" and answer["leaseMs"] == LEASE_MS
    lines = int((OUTAGE_S + 12) / STEP_S)  # it runs through the outage and ends about 10 s after it
    run = rig.add_run(task_plan(lines))
    config = rig.write_config(tick_seconds=0.5)
    with child_subreaper():
        worker = rig.start_worker_process(config)
        # The outage begins once the task runs, its Lease was renewed at the pool's length, and output arrived.
        await poll(lambda: b"out 2\n" in rig.output(run), within=30)
        granted = rig.one(
            "select l.expires_at_ms - l.renewed_at_ms from ql.run_leases l"
            " join ql.run_attempts a on a.id = l.attempt_id where a.run_id = %s",
            (run,),
        )
        assert granted == LEASE_MS, "the renewal granted the pool's Lease, not the global one"
        record = only_record(rig.journal_path)
        assert record is not None and record.handle is not None
        handle = record.handle
        held_before = rig.output(run).count(b"\n")

        await rig.served.stop_worker_ingress()
        outage_began = time.monotonic()
        await asyncio.sleep(OUTAGE_S)
        assert running(handle.pid, handle.start_time), "the task did not survive an outage shorter than its Lease"
        assert rig.run_status(run) == "running"
        assert rig.output(run).count(b"\n") == held_before, "nothing can have arrived during the outage"
        version = rig.lease_version(run)
        await rig.served.resume_worker_ingress()
        outage_s = time.monotonic() - outage_began
        # Its session expired meanwhile: the first renewal refused for it reopens the session at once, and the next
        # tick renews, whatever the backoff of its session calls had grown to during the outage.
        await poll(lambda: rig.lease_version(run) > version, within=5)

        await poll(lambda: rig.run_status(run) in ENDED_RUN, within=lines * STEP_S + 30, every=0.2)
        assert await worker.wait(0) is None, worker.output()

    assert rig.run_status(run) == "succeeded"
    attempts = rig.attempts(run)
    assert [(a["status"], a["exit_code"]) for a in attempts] == [("succeeded", 0)], attempts
    kinds = [kind for kind, _, _ in rig.events(run)]
    assert not any(k.endswith(".lost") for k in kinds), kinds
    # Everything it printed, the lines of the outage included, arrived: each stream in full, in order.
    assert rig.output(run, "stdout") == expected("out", lines)
    assert rig.output(run, "stderr") == expected("err", lines)
    # The task wrote about outage_s / STEP_S lines per stream while the control plane was away.
    assert lines - held_before >= outage_s / STEP_S
    log = worker.output()
    assert "control_plane.lost" in log and "control_plane.regained" in log, log
    assert rig.state() == "completed"


def stream_file(rig: Rig, stream: Stream) -> bytes:
    """What the task wrote to a stream, from its file in the Worker's work folder."""
    record = only_record(rig.journal_path)
    assert record is not None and record.handle is not None
    return Executor.output_path(record.handle, stream).read_bytes()


def short_lease_run(rig: Rig) -> tuple[str, Path]:
    """A 3 s Lease for the pool (its Worker stops the task 3 s into an outage), a task printing to both streams every
    50 ms for 20 s, and the Worker's config (ticks of 0.5 s)."""
    rig.one("select ql_api.pool_lease_set_v1('default', 3000)")
    return rig.add_run(task_plan(400, 0.05)), rig.write_config(tick_seconds=0.5)


async def outage_past_the_lease(rig: Rig, run: str) -> tuple[bytes, bytes, int]:
    """The Worker (a process) loses the control plane until its local Lease expires and it stops the task; then
    the database's Lease has expired too. What the task wrote to each stream, and what the database held then."""
    await poll(lambda: b"out 3\n" in rig.output(run), within=30)
    await rig.served.stop_worker_ingress()
    await poll(lambda: rig.state() == "lease_lost_local_execution_stopped", within=20)
    written = stream_file(rig, "stdout"), stream_file(rig, "stderr")
    held = len(rig.output(run))
    assert held < len(written[0]), "the task wrote more than the database held"
    return written[0], written[1], held


async def test_output_a_lost_lease_leaves_behind_is_said_lost_in_the_runs_history(rig: Rig) -> None:
    run, config = short_lease_run(rig)
    with child_subreaper():
        worker = rig.start_worker_process(config)
        out, err, held = await outage_past_the_lease(rig, run)
        # The database's Lease expired as well; recovery marks the Attempt lost (no grace here).
        expired = (
            "select count(*) from ql.run_leases l join ql.run_attempts a on a.id = l.attempt_id"
            " where a.run_id = %s and l.expires_at_ms < ql.now_ms()"
        )
        await poll(lambda: rig.one(expired, (run,)) == 1, within=10)
        rig.one("select ql_api.lease_expiry_reconcile_v1(10, 0)")
        assert rig.attempts(run)[0]["status"] == "lost"
        await rig.served.resume_worker_ingress()

        def lost_events() -> list[dict[str, object]]:
            return [
                dict(p)
                for (p,) in rig.rows(
                    "select payload from ql.run_events where run_id = %s and type = 'output.lost' order by sequence",
                    (run,),
                )
            ]

        await poll(lambda: len(lost_events()) == 2, within=30, every=0.2)
        await asyncio.sleep(2)  # a few more ticks: nothing more is recorded
        log = worker.output()
    assert lost_events() == [
        {"attemptNo": 1, "stream": "stdout", "writtenBytes": len(out), "storedBytes": held},
        {"attemptNo": 1, "stream": "stderr", "writtenBytes": len(err), "storedBytes": len(rig.output(run, "stderr"))},
    ]
    assert rig.output(run) == out[:held], "what the database holds is the start of what the task wrote"
    assert '"event": "output.lost"' in log, log
    by_worker = "select count(*) from ql.run_events where run_id = %s and actor_kind = 'worker' and type = %s"
    assert rig.one(by_worker, (run, "output.lost")) == 2


async def test_output_a_lost_lease_leaves_behind_is_stored_while_the_database_takes_it(rig: Rig) -> None:
    run, config = short_lease_run(rig)
    with child_subreaper():
        worker = rig.start_worker_process(config)
        out, err, _ = await outage_past_the_lease(rig, run)
        # The database's Lease still runs (as when a Worker stops at a local expiry that came early): it takes the rest.
        rig.conn.execute(
            "update ql.run_leases l set expires_at_ms = ql.now_ms() + 60000 from ql.run_attempts a"
            " where a.id = l.attempt_id and a.run_id = %s",
            (run,),
        )
        await rig.served.resume_worker_ingress()
        await poll(lambda: rig.output(run) == out and rig.output(run, "stderr") == err, within=30, every=0.2)
        await asyncio.sleep(2)
        assert worker.popen.poll() is None, worker.output()
    assert rig.one("select count(*) from ql.run_events where run_id = %s and type = 'output.lost'", (run,)) == 0
