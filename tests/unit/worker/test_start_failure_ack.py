"""The start-failure ACK a Worker sends, with the control plane stubbed at the client boundary
(tests/unit/worker/stub_plane.py; the real shell and Worker: tests/integration/worker/test_start_failures.py): a plan
the Executor refuses is journaled with its code and, as the record's reason, the Executor's words, which the ACK
carries as errorMessage and the `record.state` log line shows; a shell of the previous release, which refuses the
unknown field, gets the same ACK with the code alone. Nothing is spawned either way.
Touches: temporary folders, the journal.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Literal

import pytest

from qinglong.wire import ActivationRequest, ActivationResponse, ActivationStartFailureRequest
from qinglong.wire.codec import UNKNOWN_FIELD
from qinglong.wire.offer import Plan
from qinglong.worker.client import Refused, Session
from qinglong.worker.controller import LocalProcessController
from qinglong.worker.executor import Executor, TaskPolicy
from qinglong.worker.journal import Journal
from qinglong.worker.lifecycle import Lifecycle
from tests.unit.worker.stub_plane import StubPlane, offered

Phase = Literal["starting", "running", "start-failure"]
WORDS = "user 'nobody' is not on this Worker's run_as list"


class PreviousShell(StubPlane):
    """A shell of the previous release: a start-failure ACK with errorMessage is an unknown field (400)."""

    async def activate(
        self, session: Session, offer_id: str, phase: Phase, body: ActivationRequest | ActivationStartFailureRequest
    ) -> ActivationResponse:
        if isinstance(body, ActivationStartFailureRequest) and body.error_message is not None:
            self._record("refused", body)
            raise Refused(400, UNKNOWN_FIELD)
        return await super().activate(session, offer_id, phase, body)


async def _run(tmp_path: Path, plane: StubPlane) -> list[Any]:
    executor = Executor(tmp_path / "work", policy=TaskPolicy())
    lc = Lifecycle(
        journal_path=tmp_path / "journal.sqlite", client=plane, executor=executor,
        controller=LocalProcessController(grace_s=1.0), generation=1, capacity=1,
    )  # fmt: skip
    await lc.start()
    try:
        for _ in range(6):
            await lc.tick()
            if plane.status == "failed":
                break
    finally:
        await lc.stop()
    [record] = Journal.open(tmp_path / "journal.sqlite").page(None, 10)
    assert record.state == "completed" and record.data["handle"] is None, record
    return [c.body for c in plane.calls if c.name in ("start-failure", "refused")]


@pytest.mark.parametrize("plane_class", [StubPlane, PreviousShell])
async def test_a_refused_plan_s_ack_carries_its_words(
    tmp_path: Path, plane_class: type[StubPlane], caplog: pytest.LogCaptureFixture
) -> None:
    plane = plane_class(offered(Plan(argv=("true",), user="nobody")), {})
    with caplog.at_level(logging.INFO, logger="qinglong.worker"):
        bodies = await _run(tmp_path, plane)
    assert plane.error_code == "plan.user_not_allowed"
    said = [(b.error_code, b.error_message) for b in bodies]
    if plane_class is PreviousShell:
        assert said == [("plan.user_not_allowed", WORDS), ("plan.user_not_allowed", None)], said
    else:
        assert said == [("plan.user_not_allowed", WORDS)], said
    moves = [json.loads(r.getMessage()) for r in caplog.records if '"record.state"' in r.getMessage()]
    [failed] = [m for m in moves if m["to"] == "start_failed"]
    assert (failed["error"], failed["reason"]) == ("plan.user_not_allowed", WORDS), failed
    assert not (tmp_path / "work" / "tasks").exists() or not any((tmp_path / "work" / "tasks").iterdir())
