"""The running ACK a Worker takes along with its first renewal after the spawn (decision 0031), with the control plane
stubbed at the client boundary (tests/unit/worker/stub_plane.py; the real shell and database:
tests/integration/worker): the record goes `started` → `running_acknowledged` on that renewal's answer and no
activation call of phase running is made; a shell of the previous release, which refuses the unknown field, gets the
running ACK of its own and then the plain renewal. Touches: temporary folders, the journal, a `sleep` process.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from qinglong.wire import LeaseControlRequest, LeaseControlResponse
from qinglong.wire.codec import UNKNOWN_FIELD
from qinglong.wire.offer import Plan
from qinglong.worker.client import Refused, Session
from qinglong.worker.controller import LocalProcessController
from qinglong.worker.executor import Executor, TaskPolicy
from qinglong.worker.identity import ProcessHandle
from qinglong.worker.journal import Journal
from qinglong.worker.lifecycle import Lifecycle
from tests.unit.worker.stub_plane import StubPlane, offered


class PreviousShell(StubPlane):
    """A shell of the previous release: a lease-control body with `running` is an unknown field (400)."""

    async def lease_control(
        self, session: Session, body: LeaseControlRequest, *, timeout_s: float | None = None
    ) -> LeaseControlResponse:
        if body.running is not None:
            self._record("refused", body)
            raise Refused(400, UNKNOWN_FIELD)
        return await super().lease_control(session, body, timeout_s=timeout_s)


async def _until_running(tmp_path: Path, plane: StubPlane) -> list[tuple[str, Any]]:
    """Tick a Worker until its record is running_acknowledged; the calls it made (name, body), then stop it."""
    executor = Executor(tmp_path / "work", policy=TaskPolicy(allow_root_tasks=True))
    lc = Lifecycle(
        journal_path=tmp_path / "journal.sqlite", client=plane, executor=executor,
        controller=LocalProcessController(grace_s=1.0), generation=1, capacity=1,
    )  # fmt: skip
    await lc.start()
    try:
        for _ in range(3):
            if plane.status == "running":
                break
            await lc.tick()
    finally:
        await lc.stop()
    [record] = Journal.open(tmp_path / "journal.sqlite").page(None, 10)
    handle = ProcessHandle.from_dict(record.data["handle"])
    with contextlib.suppress(ProcessLookupError):
        os.killpg(handle.pgid, signal.SIGKILL)
    assert record.state == "running_acknowledged", record.state
    return [(c.name, c.body) for c in plane.calls]


@pytest.mark.parametrize("plane_class", [StubPlane, PreviousShell])
async def test_the_first_renewal_after_the_spawn_takes_the_running_ack_along(
    tmp_path: Path, plane_class: type[StubPlane]
) -> None:
    plane = plane_class(offered(Plan(argv=("sleep", "30"))), {})
    calls = await _until_running(tmp_path, plane)
    assert plane.status == "running"
    names = [name for name, _ in calls if name in ("starting", "running", "lease-control", "refused")]
    renewals = [body for name, body in calls if name == "lease-control"]
    if plane_class is PreviousShell:
        # the refused body said running; the running ACK went alone, then the plain renewal
        assert names == ["starting", "starting", "refused", "running", "lease-control"], names
        assert [b.running for b in renewals] == [None]
    else:
        assert names == ["starting", "starting", "lease-control"], names  # the ACK and its replay before the spawn
        assert [b.running for b in renewals] == [True]
