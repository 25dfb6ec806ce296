"""A retry happens at its retry time (docs/architecture.md §4 item 2): a real `qinglong-worker run` process whose
task fails once, with `retryBackoffMs` 1000, is offered the retry by its own next pull about a second later and
runs it to success — with no convergence at all: the move back to queued is the pull's (`run.requeued` by actor
`system`), no event is the reconciler's, and pg_cron is not installed in the test's database (which is
where ql/converge_schedule would schedule convergence).
Touches: a fresh database, the in-process shell on TLS 1.3 loopback, one Worker process and its task processes
(this process is their child subreaper meanwhile), a marker file in the test's folder.
"""

from __future__ import annotations

import signal

import pytest

from tests.integration.worker.conftest import ENDED_RUN, Rig, child_subreaper, poll

pytestmark = pytest.mark.db

BACKOFF_MS = 1000


async def test_a_retry_with_a_1000_ms_backoff_runs_about_a_second_later_without_convergence(rig: Rig) -> None:
    marker = rig.root / "failed-once"
    run = rig.add_run(
        {
            "argv": ["sh", "-c", f'if [ -e "{marker}" ]; then exit 0; else touch "{marker}"; exit 3; fi'],
            "maxAttempts": 2,
            "retryBackoffMs": BACKOFF_MS,
        }
    )
    assert rig.one("select count(*) from pg_catalog.pg_extension where extname = 'pg_cron'") == 0, (
        "no pg_cron job here: nothing but the Worker's pulls can move the Run"
    )
    with child_subreaper():
        worker = rig.start_worker_process(rig.write_config(tick_seconds=0.2))
        await poll(lambda: rig.run_status(run) in ENDED_RUN, within=20, every=0.05)
        worker.popen.send_signal(signal.SIGTERM)
        assert await worker.wait(10) == 0, worker.output()

    assert rig.run_status(run) == "succeeded", worker.output()
    first, second = rig.attempts(run)
    assert [(a["attempt_no"], a["status"], a["exit_code"]) for a in (first, second)] == [
        (1, "failed", 3),
        (2, "succeeded", 0),
    ]
    ended, retry_at, claimed = rig.one(
        "select a1.ended_at_ms, (e.payload ->> 'retryAtMs')::bigint, a2.claimed_at_ms"
        " from ql.run_attempts a1 join ql.run_attempts a2 on a2.run_id = a1.run_id and a2.attempt_no = 2"
        " join ql.run_events e on e.run_id = a1.run_id and e.type = 'run.retry_scheduled'"
        " where a1.run_id = %s and a1.attempt_no = 1",
        (run,),
    )
    assert retry_at == ended + BACKOFF_MS, "the retry time is the failure's database time + the backoff"
    assert retry_at <= claimed <= retry_at + 3000, (
        f"claimed {claimed - retry_at} ms after its retry time: at the Worker's next pulls, not a convergence later"
    )
    events = rig.events(run)
    assert [(t, k) for t, k, _ in events] == [
        ("run.queued", "system"),
        ("attempt.starting", "worker"),
        ("attempt.failed", "worker"),
        ("run.retry_scheduled", "worker"),
        ("run.requeued", "system"),
        ("attempt.starting", "worker"),
        ("attempt.succeeded", "worker"),
        ("run.succeeded", "worker"),
    ], events
