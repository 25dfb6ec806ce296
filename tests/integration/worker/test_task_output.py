"""A task's output reaches the database while it runs (qinglong/run-output@v1): stdout
and stderr as two streams with their exact bytes; output of a task still running; a 5 MiB stdout costs
its head and its tail on the wire and in the database; a Worker killed and restarted mid-task goes on
from where the database is, without a gap or a duplicate; a restarted Worker's first append from 0 is
answered with what the database holds, also after the Attempt ended (a completion whose answer was
lost); output refused because the Attempt ended goes on to the completion, which decides; a link that never
carries an append delays the completion by a bounded number of drains.
Touches: a fresh database, the in-process shell on TLS 1.3 loopback, real task processes, Worker
processes (this process is their child subreaper meanwhile), the journal (read-only while owned).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from qinglong.wire import CompletionResponse, OutputAppended, OutputAppendRequest
from qinglong.wire.output import CHUNK_MAX_BYTES
from qinglong.worker.client import Refused, TransportError
from qinglong.worker.coordinator import DRAIN_STALLS
from tests.integration.worker.conftest import (
    ENDED_RUN,
    Rig,
    SpyClient,
    child_subreaper,
    only_record,
    poll,
    running,
    status_file,
)

pytestmark = pytest.mark.db

BIG_LINES = 5 * 2**17  # 8-byte lines: 5 MiB


def _python(folder: Path, source: str) -> list[str]:
    """The argv of a Python task running `source` (a file: a plan's argv holds no control characters)."""
    script = folder / "task.py"
    script.write_text(source)
    return [sys.executable, str(script)]


def _big() -> bytes:
    return b"".join(b"%07d\n" % i for i in range(BIG_LINES))


def _chunks(rig: Rig, run: str, stream: str) -> list[tuple[int, bytes]]:
    """(byte offset, data) of one stream's stored chunks, in byte order."""
    return [
        (int(offset), bytes(data))
        for offset, data in rig.rows(
            "select c.byte_offset, c.data from ql.output_chunks c join ql.run_attempts a on a.id = c.attempt_id"
            " where a.run_id = %s and c.stream::text = %s order by c.byte_offset",
            (run, stream),
        )
    ]


def _answers(client: SpyClient, stream: str) -> list[OutputAppended]:
    found = []
    for call in client.named("output"):
        assert isinstance(call.body, OutputAppendRequest)
        if call.body.stream == stream and isinstance(call.result, OutputAppended):
            found.append(call.result)
    return found


async def test_stdout_and_stderr_land_as_two_streams_with_their_exact_bytes(rig: Rig, tmp_path: Path) -> None:
    script = (
        "import sys, time\n"
        "o, e = sys.stdout.buffer, sys.stderr.buffer\n"
        "o.write(b'out \\x00\\xff one\\n'); o.flush(); e.write(b'err \\xfe one\\n'); e.flush()\n"
        "o.write(b'out two, no newline'); o.flush(); e.write(b'err two\\n'); e.flush()\n"
    )
    run = rig.add_run({"argv": _python(tmp_path, script), "maxAttempts": 1})
    lc = rig.lifecycle()
    await lc.start()
    await rig.tick_until(lc, lambda: rig.run_status(run) in ENDED_RUN)
    assert rig.run_status(run) == "succeeded", rig.output(run, "stderr")
    assert rig.output(run) == b"out \x00\xff one\nout two, no newline"
    assert rig.output(run, "stderr") == b"err \xfe one\nerr two\n"


async def test_a_task_that_cannot_start_says_why_on_its_stderr(rig: Rig, tmp_path: Path) -> None:
    run = rig.add_run({"argv": [str(tmp_path / "no-such-program")], "maxAttempts": 1})
    lc = rig.lifecycle()
    await lc.start()
    await rig.tick_until(lc, lambda: rig.run_status(run) in ENDED_RUN)
    [attempt] = rig.attempts(run)
    assert (rig.run_status(run), attempt["exit_code"]) == ("failed", 127)
    line = rig.output(run, "stderr")
    assert line.startswith(b"qinglong-runner: cannot execute") and line.endswith(b"(exit 127)\n"), line
    assert rig.output(run) == b""


async def test_output_of_a_running_task_reaches_the_database_while_it_runs(rig: Rig, tmp_path: Path) -> None:
    rig.set_lease_ttl(5000)
    flag = tmp_path / "go-on"
    script = f"echo started; echo warming up >&2; while [ ! -e {flag} ]; do sleep 0.05; done; echo finished"
    run = rig.add_run({"argv": ["sh", "-c", script], "maxAttempts": 1})
    client = rig.client()
    lc = rig.lifecycle(client)
    await lc.start()
    await rig.tick_until(lc, lambda: (rig.output(run), rig.output(run, "stderr")) == (b"started\n", b"warming up\n"))

    handle = rig.record().handle
    assert handle is not None
    assert running(handle.pid, handle.start_time) and status_file(handle) is None, "the task is no longer running"
    assert rig.run_status(run) == "running"
    assert rig.record().state == "running_acknowledged"

    flag.touch()
    await rig.tick_until(lc, lambda: rig.run_status(run) in ENDED_RUN)
    assert rig.run_status(run) == "succeeded"
    assert (rig.output(run), rig.output(run, "stderr")) == (b"started\nfinished\n", b"warming up\n")

    # A tick appends only after its renewal was answered; the last appends are the drain before the completion.
    names = [c.name for c in client.calls if c.name in ("heartbeat", "lease-control", "output", "completion")]
    for i, name in enumerate(names):
        if name == "output":
            before, after = names[:i], names[i + 1 :]
            behind_renewal = next(n for n in reversed(before) if n != "output") == "lease-control"
            draining = next(n for n in after if n != "output") == "completion"
            assert behind_renewal or draining, names
    assert all(c.error is None for c in client.named("output"))


async def test_a_5_mib_stdout_costs_its_head_and_its_tail(rig: Rig, tmp_path: Path) -> None:
    rig.set_lease_ttl(5000)
    script = (
        "import sys\n"
        f"data = b''.join(b'%07d\\n' % i for i in range({BIG_LINES}))\n"
        "sys.stdout.buffer.write(data); sys.stdout.flush()\n"
        "sys.stderr.write('the last stderr line\\n'); sys.stderr.flush()\n"
        "sys.stdout.write('the last stdout line\\n')\n"
    )
    run = rig.add_run({"argv": _python(tmp_path, script), "maxAttempts": 1})
    client = rig.client()
    lc = rig.lifecycle(client)
    await lc.start()
    await rig.tick_until(lc, lambda: rig.run_status(run) in ENDED_RUN, within=30)
    assert rig.run_status(run) == "succeeded", rig.output(run, "stderr")

    whole = _big() + b"the last stdout line\n"
    answers = _answers(client, "stdout")
    head, tail = answers[-1].head_bytes, answers[-1].tail_bytes
    assert head + tail + CHUNK_MAX_BYTES < len(whole), "the caps keep the whole stream: nothing to skip"
    assert answers[-1].next_offset == len(whole) == 5 * 2**20 + len(b"the last stdout line\n")
    ends = (
        "select s.stream::text, e.next_offset from ql.output_streams s, ql.output_stream_end(s.attempt_id, s.stream) e"
    )
    assert dict(rig.rows(ends)) == {
        "stdout": len(whole),
        "stderr": len(b"the last stderr line\n"),
    }

    chunks = _chunks(rig, run, "stdout")
    for offset, data in chunks:  # every stored byte where the task wrote it
        assert whole[offset : offset + len(data)] == data, offset
    stored = b"".join(data for _, data in chunks)
    assert stored.startswith(whole[:head]), "the head is not held whole"
    assert stored.endswith(b"the last stdout line\n")
    last_offset, last = chunks[-1]
    assert last_offset + len(last) == len(whole)
    kept = sum(len(data) for _, data in chunks)
    assert kept <= head + tail + CHUNK_MAX_BYTES, (kept, head, tail)
    on_the_wire = sum(
        len(c.body.data) for c in client.named("output") if isinstance(c.body, OutputAppendRequest)
    )  # fmt: skip
    assert on_the_wire <= head + tail + CHUNK_MAX_BYTES + len(b"the last stderr line\n"), (on_the_wire, head, tail)
    assert rig.output(run, "stderr") == b"the last stderr line\n"


async def test_a_worker_killed_mid_task_goes_on_from_where_the_database_is(rig: Rig, tmp_path: Path) -> None:
    rig.set_lease_ttl(10000)
    lines = 150
    script = (
        "import sys, time\n"
        f"for i in range({lines}):\n"
        "    sys.stdout.write('line %06d\\n' % i); sys.stdout.flush(); time.sleep(0.02)\n"
    )
    expected = b"".join(b"line %06d\n" % i for i in range(lines))
    run = rig.add_run({"argv": _python(tmp_path, script), "maxAttempts": 1})
    config = rig.write_config(tick_seconds=0.2)
    with child_subreaper():
        first = rig.start_worker_process(config)
        await poll(lambda: len(rig.output(run)) >= 200, within=20, every=0.05)
        first.popen.send_signal(signal.SIGKILL)
        assert await first.wait(5) == -signal.SIGKILL
        record = only_record(rig.journal_path)
        assert record is not None and record.handle is not None
        handle = record.handle
        assert running(handle.pid, handle.start_time), "the task ended before its Worker was killed"
        held = rig.output(run)
        assert 0 < len(held) < len(expected) and expected.startswith(held)

        second = rig.start_worker_process(config)
        await poll(lambda: rig.run_status(run) in ENDED_RUN, within=30, every=0.05)
        assert rig.run_status(run) == "succeeded", second.output()
        await poll(lambda: rig.state() == "completed", within=5)
        second.popen.send_signal(signal.SIGTERM)
        assert await second.wait(10) == 0, second.output()

    assert rig.output(run) == expected
    end = 0
    for offset, data in _chunks(rig, run, "stdout"):  # contiguous: no gap, no byte stored twice
        assert offset == end, (offset, end)
        end += len(data)
    assert end == len(expected)


def _appends_and_completions(client: SpyClient) -> list[tuple[str, str | None]]:
    """(name, refusal code or None) of the output and completion calls, in order (no transport failure)."""
    found: list[tuple[str, str | None]] = []
    for c in client.calls:
        if c.name in ("output", "completion"):
            assert c.error is None or isinstance(c.error, Refused), c.error
            found.append((c.name, None if c.error is None else c.error.code))
    return found


async def test_a_restarted_worker_whose_completion_answer_was_lost_replays_output_and_completion(
    rig: Rig, tmp_path: Path
) -> None:
    rig.set_lease_ttl(5000)
    flag = tmp_path / "go-on"
    run = rig.add_run({"argv": ["sh", "-c", f"echo the output; while [ ! -e {flag} ]; do sleep 0.05; done"]})
    client = rig.client()
    lc = rig.lifecycle(client)
    await lc.start()
    await rig.tick_until(lc, lambda: rig.output(run) == b"the output\n")
    handle = rig.record().handle
    assert handle is not None
    flag.touch()
    await poll(lambda: status_file(handle) is not None, within=10)
    # The completion commits and its answer is cut; the lease control after it loses its answer too.
    rig.served.lose.update({"completion": 1, "lease-control": 1})
    await lc.tick()
    assert rig.served.lost == ["completion", "lease-control"]
    assert isinstance(client.named("completion")[-1].error, TransportError)
    assert rig.run_status(run) == "succeeded" and rig.state() == "completion_pending"
    await lc.stop()

    again = rig.client()
    restarted = rig.lifecycle(again)
    await restarted.start()  # knows nothing of what was shipped: appends from 0
    # Bytes the database holds are answered unchanged, also after the Attempt ended; the completion is replayed.
    assert _appends_and_completions(again) == [("output", None), ("completion", None)]
    assert [a.next_offset for a in _answers(again, "stdout")] == [len(b"the output\n")]
    [completion] = again.named("completion")
    assert isinstance(completion.result, CompletionResponse) and completion.result.status == "already_completed"
    assert rig.state() == "completed"
    assert rig.output(run) == b"the output\n"


async def test_output_refused_after_the_attempt_ended_goes_on_to_the_completion_which_decides(rig: Rig) -> None:
    rig.set_lease_ttl(1500)
    run = rig.add_run({"argv": ["sh", "-c", "sleep 0.5; echo late output"], "maxAttempts": 1})
    lc = rig.lifecycle()
    await lc.start()
    await rig.tick_until(lc, lambda: rig.state() == "running_acknowledged")
    await lc.stop()  # the Worker is away while its task writes and exits
    handle = rig.record().handle
    assert handle is not None
    await poll(lambda: status_file(handle) == {"exitCode": 0, "signal": None}, within=10)
    expires = rig.one(
        "select l.expires_at_ms from ql.run_leases l join ql.run_attempts a on a.id = l.attempt_id where a.run_id = %s",
        (run,),
    )
    await poll(lambda: rig.db_now_ms() > expires, within=10)
    rig.one("select ql_api.lease_expiry_reconcile_v1(10, 0)")
    assert [a["status"] for a in rig.attempts(run)] == ["lost"]

    again = rig.client()
    restarted = rig.lifecycle(again)
    await restarted.start()
    assert _appends_and_completions(again) == [("output", "fenced.state_drift"), ("completion", "fenced.state_drift")]
    record = rig.record()
    assert (record.state, record.data["reason"]) == ("control_plane_terminal", "fenced.state_drift")
    assert rig.output(run) == b"" and rig.rows("select * from ql.output_streams") == []


async def test_a_link_that_never_carries_an_append_delays_the_completion_by_three_drains_only(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """Every output answer is lost (a link that carries renewals but no append, say a chunk too large for its
    rate): after DRAIN_STALLS drains in a row that got no byte through, the completion goes anyway."""
    rig.set_lease_ttl(5000)
    run = rig.add_run({"argv": ["sh", "-c", "echo some output"]})
    rig.served.lose["output"] = 1000
    client = rig.client()
    lc = rig.lifecycle(client)
    await lc.start()
    await rig.tick_until(lc, lambda: rig.state() == "completed", within=20)
    calls = [
        (c.name, type(c.error).__name__ if c.error else None)
        for c in client.calls
        if c.name in ("output", "completion")
    ]
    assert calls[-1] == ("completion", None) and set(calls[:-1]) == {("output", "TransportError")}, calls
    assert len(calls) - 1 >= DRAIN_STALLS, calls  # (and whatever the ticks while it ran tried to ship)
    abandoned = [r.getMessage() for r in caplog.records if "output.drain_abandoned" in r.getMessage()]
    assert len(abandoned) == 1 and f'"drains": {DRAIN_STALLS}' in abandoned[0], abandoned
    assert rig.run_status(run) == "succeeded" and [a["status"] for a in rig.attempts(run)] == ["succeeded"]
    assert rig.output(run) == b"some output\n", "each append committed; only its answer was lost"
