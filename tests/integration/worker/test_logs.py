"""The Worker's log: one JSON line per record state change, with ids and reasons, and never the lease
token (which the journal holds, 0600). Touches: a fresh database, the in-process shell, a task process.
"""

from __future__ import annotations

import json
import logging

import pytest

from qinglong.wire import OfferOffered
from tests.integration.worker.conftest import ENDED_RUN, Rig

pytestmark = pytest.mark.db


async def test_state_changes_are_logged_without_the_lease_token(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="qinglong.worker")
    run = rig.add_run({"argv": ["sh", "-c", "echo logged; sleep 0.5"], "timeoutMs": 60000})  # still runs at its renewal
    client = rig.client()
    lc = rig.lifecycle(client)
    await lc.start()
    await rig.tick_until(lc, lambda: rig.run_status(run) in ENDED_RUN)
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "qinglong.worker"]
    moves = [
        (line["from"], line["to"]) for line in lines if line["event"] == "record.state" and line["run"] == str(run)
    ]
    assert moves == [
        ("accepted", "starting_acknowledged"),
        ("starting_acknowledged", "launching"),
        ("launching", "started"),
        ("started", "running_acknowledged"),
        ("running_acknowledged", "completion_pending"),
        ("completion_pending", "completed"),
    ]
    [offered] = [c.result for c in client.named("pull") if isinstance(c.result, OfferOffered)]
    assert offered.lease_token not in caplog.text
