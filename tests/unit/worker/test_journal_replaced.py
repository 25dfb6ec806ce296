"""A journal replaced while a tick runs (after its first check, during supervision) stops that very tick before it
pulls: the Worker claims nothing it would not find again after a restart, fails closed and logs journal.replaced once.
The control plane is stubbed at the client boundary (tests/unit/worker/stub_plane.py); the chaos engine deletes
journals under real Workers (tests/support/chaos). Touches: temporary folders, the journal, a `sleep` process.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sqlite3
from pathlib import Path

import pytest

from qinglong.wire import LeaseControlRequest, LeaseControlResponse, OfferOffered
from qinglong.wire.offer import Plan
from qinglong.worker.client import Session
from qinglong.worker.controller import LocalProcessController
from qinglong.worker.executor import Executor, TaskPolicy
from qinglong.worker.lifecycle import Lifecycle
from tests.unit.worker.stub_plane import StubPlane, offered


class ReplacingPlane(StubPlane):
    """Once armed, its next renewal answer comes after the Worker's journal was deleted and made anew."""

    def __init__(self, journal: Path, offer: OfferOffered) -> None:
        super().__init__(offer, {})
        self.journal, self.armed, self.replaced = journal, False, 0

    async def lease_control(
        self, session: Session, body: LeaseControlRequest, *, timeout_s: float | None = None
    ) -> LeaseControlResponse:
        if self.armed:
            self.armed = False
            self.journal.unlink()
            self.journal.write_bytes(b"")
            self.replaced += 1
        return await super().lease_control(session, body, timeout_s=timeout_s)


async def test_a_journal_replaced_during_supervision_stops_the_tick_before_its_pull(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    journal = tmp_path / "journal.sqlite"
    plane = ReplacingPlane(journal, offered(Plan(argv=("sleep", "30"))))
    executor = Executor(tmp_path / "work", policy=TaskPolicy(allow_root_tasks=True))
    lc = Lifecycle(
        journal_path=journal, client=plane, executor=executor,
        controller=LocalProcessController(grace_s=1.0), generation=1, capacity=2,
    )  # fmt: skip
    await lc.start()
    pgid = None
    try:
        for _ in range(3):
            if plane.status == "running":
                break
            await lc.tick()
        assert plane.status == "running"
        pgid = _task_pgid(journal)
        pulls, closed = plane.names().count("pull"), lc.failed_closed
        assert pulls >= 1 and not closed
        plane.armed = True
        with caplog.at_level(logging.ERROR, logger="qinglong.worker"):
            await lc.tick()  # supervision renews (and the journal is replaced meanwhile), then it would pull
            await lc.tick()
        assert plane.replaced == 1, "the renewal did not run"
        assert lc.failed_closed
        assert plane.names().count("pull") == pulls, "a pull went out on a replaced journal"
        logged = [json.loads(r.getMessage())["event"] for r in caplog.records]
        assert logged.count("journal.replaced") == 1, logged
    finally:
        await lc.stop()
        if pgid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)


def _task_pgid(journal: Path) -> int:
    """The task's process group, read from the journal as it is on disk (its owner holds the lock)."""
    conn = sqlite3.connect(f"file:{journal}?mode=ro", uri=True)
    try:
        [(data,)] = conn.execute("select data from inbox").fetchall()
    finally:
        conn.close()
    return int(json.loads(data)["handle"]["pgid"])
