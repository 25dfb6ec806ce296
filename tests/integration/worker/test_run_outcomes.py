"""How a Run ends when the Worker runs it (docs/architecture.md §7, decision 0000 (ADR-0118 §2-§4)): success with its
output in the database before the completion, which carries no artifact; a timeout decided by the control
plane (never a local timer) and delivered as stop_requested; a user cancellation delivered the same way.
Touches: a fresh database, the in-process shell on TLS 1.3 loopback, real task processes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from qinglong.wire import CompletionRequest, LeaseStopRequested
from qinglong.worker.identity import ProcessHandle
from tests.integration.shell.conftest import user_call, user_http
from tests.integration.worker.conftest import ENDED_RUN, Call, Rig, SpyClient, poll, running, status_file

pytestmark = pytest.mark.db

CANCEL = "qinglong/run-cancellation@v1"


def _watch_lease_answers(client: SpyClient, handle: ProcessHandle) -> list[bool]:
    """Whether the task still ran at the instant each lease-control answer arrived (before it is acted on)."""
    alive: list[bool] = []

    def look(call: Call) -> None:
        if call.name == "lease-control":
            alive.append(running(handle.pid, handle.start_time))

    client.on_answer = look
    return alive


async def test_a_run_that_succeeds_ships_its_output_then_completes(rig: Rig) -> None:
    rig.set_lease_ttl(3000)
    run = rig.add_run({"argv": ["sh", "-c", "echo hello from the task; echo line two >&2"], "timeoutMs": 60000})
    client = rig.client()
    lc = rig.lifecycle(client)
    await lc.start()
    await rig.tick_until(lc, lambda: rig.run_status(run) in ENDED_RUN)

    assert rig.run_status(run) == "succeeded"
    [attempt] = rig.attempts(run)
    assert (attempt["attempt_no"], attempt["status"], attempt["exit_code"]) == (1, "succeeded", 0)
    assert [t for t, _, _ in rig.events(run)] == [
        "run.queued",
        "attempt.starting",
        "attempt.succeeded",
        "run.succeeded",
    ]

    # The output is in the database, each stream apart, and no artifact was stored.
    assert (rig.output(run), rig.output(run, "stderr")) == (b"hello from the task\n", b"line two\n")
    assert rig.one("select count(*) from ql.artifacts where attempt_id = %s", (attempt["id"],)) == 0

    # Every append was answered before the completion was sent; the completion carried no artifact and
    # the latest Lease version, and the database stored exactly it.
    appends = client.named("output")
    [completion] = client.named("completion")
    assert appends and all(a.error is None and a.ended_ns <= completion.started_ns for a in appends)
    body = completion.body
    assert isinstance(body, CompletionRequest)
    assert body.artifacts == ()
    assert body.exit_code == 0 and body.error_code is None
    assert body.lease_version == rig.one("select version from ql.run_leases where attempt_id = %s", (attempt["id"],))
    assert rig.one(
        "select a.completion_digest = sha256(convert_to(jsonb_build_object('leaseVersion', %s::bigint,"
        " 'exitCode', 0, 'errorCode', null, 'artifacts', '[]'::jsonb)::text, 'UTF8'))"
        " from ql.run_attempts a where a.id = %s",
        (body.lease_version, attempt["id"]),
    ), "the stored completion is not the one the Worker sent"

    # The journal record ends `completed`; nothing about output was journaled.
    record = rig.record()
    assert record.state == "completed"
    assert record.data["exit_code"] == 0
    assert not {"receipts", "output"} & set(record.data)


async def test_a_timeout_is_decided_by_the_control_plane_and_stops_the_process_through_stop_requested(
    rig: Rig,
) -> None:
    rig.set_lease_ttl(3000)
    run = rig.add_run({"argv": ["sleep", "30"], "timeoutMs": 1500})
    client = rig.client()
    lc = rig.lifecycle(client)
    await lc.start()
    await rig.tick_until(
        lc, lambda: rig.state() == "running_acknowledged" and rig.record().lease_expires_ns is not None
    )
    handle = rig.record().handle
    assert handle is not None
    [attempt] = rig.attempts(run)
    deadline = attempt["deadline_at_ms"]
    assert deadline is not None

    # No tick for a while: the database deadline passes (within the Lease) and nothing local reacts.
    await poll(lambda: rig.db_now_ms() >= deadline + 400, within=5, every=0.05)
    assert running(handle.pid, handle.start_time), "the process ended without a stop request"
    assert status_file(handle) is None
    assert rig.one("select cancel_requested_at_ms from ql.runs where id = %s", (run,)) is None
    assert [c.result.status for c in client.named("lease-control")] == ["renewed"]  # type: ignore[attr-defined]

    # The next tick's lease control writes the timeout intent and answers stop_requested; that tick stops it.
    alive_when_answered = _watch_lease_answers(client, handle)
    before = len(client.calls)
    await lc.tick()
    [answer] = [c for c in client.calls[before:] if c.name == "lease-control"]
    assert isinstance(answer.result, LeaseStopRequested) and answer.result.stop_reason == "timeout"
    assert alive_when_answered == [True], "the process ended before the stop request arrived"
    assert not running(handle.pid, handle.start_time)
    status = status_file(handle)
    assert status == {"exitCode": None, "signal": 15}, status
    stopped_at = os.stat(Path(handle.status_path)).st_mtime
    assert stopped_at * 1000 > deadline + 400, "the process did not outlive its deadline"
    cancel_at, reason = rig.one("select cancel_requested_at_ms, cancel_reason::text from ql.runs where id = %s", (run,))
    assert reason == "timeout" and cancel_at >= deadline

    await rig.tick_until(lc, lambda: rig.run_status(run) in ENDED_RUN)
    assert rig.run_status(run) == "timed_out"
    [attempt] = rig.attempts(run)
    assert attempt["status"] == "timed_out"
    events = rig.events(run)
    assert [t for t, _, _ in events] == [
        "run.queued",
        "attempt.starting",
        "run.cancel_requested",
        "attempt.timed_out",
        "run.timed_out",
    ]
    assert events[2][1:] == ("system", None)
    assert rig.record().state == "completed"


async def test_a_user_cancellation_ends_a_running_run_cancelled(rig: Rig) -> None:
    rig.set_lease_ttl(3000)
    run = rig.add_run({"argv": ["sleep", "30"], "timeoutMs": 60000})
    client = rig.client()
    lc = rig.lifecycle(client)
    await lc.start()
    await rig.tick_until(lc, lambda: rig.state() == "running_acknowledged")
    handle = rig.record().handle
    assert handle is not None and running(handle.pid, handle.start_time)

    assert rig.served.shell is not None
    async with user_http(rig.pki) as http:
        reply = await user_call(
            http,
            rig.served.shell,
            "POST",
            f"/api/v3/projects/{rig.project}/runs/{run}/cancellation",
            token=rig.operator.token,
            body={"schema": CANCEL, "mutationId": "cancel-1"},
        )
    assert reply.status == 202 and reply.json()["status"] == "accepted", reply
    assert running(handle.pid, handle.start_time), "the cancellation API must not touch the process"

    alive_when_answered = _watch_lease_answers(client, handle)
    before = len(client.calls)
    await lc.tick()
    [answer] = [c for c in client.calls[before:] if c.name == "lease-control"]
    assert isinstance(answer.result, LeaseStopRequested) and answer.result.stop_reason == "user"
    assert alive_when_answered == [True]
    assert not running(handle.pid, handle.start_time)
    assert status_file(handle) == {"exitCode": None, "signal": 15}

    await rig.tick_until(lc, lambda: rig.run_status(run) in ENDED_RUN)
    assert rig.run_status(run) == "cancelled"
    [attempt] = rig.attempts(run)
    assert attempt["status"] == "cancelled"
    events = rig.events(run)
    assert [t for t, _, _ in events][2:] == [
        "run.cancel_requested",
        "attempt.cancelled",
        "run.cancelled",
    ]
    assert events[2][1:] == ("user", str(rig.operator.id))
    assert rig.record().state == "completed"
