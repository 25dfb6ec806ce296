"""A home link's outage under the pool's Lease (docs/decisions/0028-lease-length-per-pool.md): a Worker that loses
the control plane for less than its pool's Lease keeps its task running, and the output the task wrote meanwhile
arrives afterwards, complete; the Run ends as the task did, with one Attempt. The outage is longer than the global
Lease (which alone would have stopped the task) and than the session TTL (the Worker's session expires during it
and a new one carries on).

The suite's outage is 20 s under a 60 s Lease (and a 10 s session TTL). The full case of a home link, a 2-minute
outage under a 5-minute Lease with the default session TTL, is the same test given parameters (about 3 minutes):
QL_OUTAGE_S=120 QL_OUTAGE_LEASE_MS=300000 QL_OUTAGE_SESSION_TTL_MS=120000 pytest tests/integration/worker/test_edge_outage.py

Touches: a fresh database, the in-process shell on TLS 1.3 loopback (its worker ingress stopped, then listening
again on the same port), a `qinglong-worker run` process and its task (this process is their child subreaper).
"""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from tests.integration.worker.conftest import ENDED_RUN, Rig, child_subreaper, only_record, poll, running

pytestmark = pytest.mark.db

OUTAGE_S = float(os.environ.get("QL_OUTAGE_S", "20"))
LEASE_MS = int(os.environ.get("QL_OUTAGE_LEASE_MS", "60000"))
SESSION_TTL_MS = int(os.environ.get("QL_OUTAGE_SESSION_TTL_MS", "10000"))
GLOBAL_LEASE_MS = 3000  # what every other pool gets: an outage of the suite's length would stop a task under it
STEP_S = 0.25  # the task prints a line to each stream every STEP_S


def task_plan(lines: int) -> dict[str, object]:
    script = (
        f'i=0; while [ $i -lt {lines} ]; do i=$((i+1)); echo "out $i"; echo "err $i" >&2; sleep {STEP_S}; done'
    )
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
            "select l.expires_at_ms - l.renewed_at_ms from ql.run_leases l join ql.run_attempts a on a.id = l.attempt_id"
            " where a.run_id = %s",
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
        await rig.served.resume_worker_ingress()
        outage_s = time.monotonic() - outage_began

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
