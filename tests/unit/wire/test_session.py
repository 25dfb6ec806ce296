"""Tests of qinglong/worker-session@v1 (qinglong.wire.session). Touches nothing."""

from __future__ import annotations

import pytest

from qinglong.wire import WireError
from qinglong.wire.session import (
    WorkerSessionHeartbeatRequest,
    WorkerSessionOpened,
    WorkerSessionOpenRequest,
)
from tests.unit.wire.kit import (
    TOKEN,
    UUID,
)

OPENED = {
    "status": "opened",
    "sessionId": UUID,
    "workerGeneration": 3,
    "capacity": 4,
    "openedAtMs": 1_700_000_000_000,
    "expiresAtMs": 1_700_000_120_000,
    "replacedSessionId": None,
}


def test_the_opened_response_is_the_result_plus_the_session_key() -> None:
    opened = WorkerSessionOpened.from_result(OPENED, sessionKey=TOKEN)
    assert opened.session_key == TOKEN and opened.replaced_session_id is None
    assert TOKEN not in repr(opened)
    assert WorkerSessionOpened.parse(opened.to_json()) == opened
    with pytest.raises(WireError) as caught:
        WorkerSessionOpened.from_result(OPENED)
    assert caught.value.code == "wire.missing_field"


@pytest.mark.parametrize(("capacity", "ok"), [(0, False), (1, True), (1024, True), (1025, False)])
def test_capacity_is_1_to_1024(capacity: int, ok: bool) -> None:
    body = b'{"capacity":%d,"schema":"qinglong/worker-session@v1","workerGeneration":1}' % capacity
    if ok:
        assert WorkerSessionOpenRequest.parse(body).capacity == capacity
    else:
        with pytest.raises(WireError, match="out_of_range"):
            WorkerSessionOpenRequest.parse(body)


def test_a_heartbeat_body_carries_only_the_generation() -> None:
    msg = WorkerSessionHeartbeatRequest(worker_generation=2)
    assert msg.to_json() == b'{"schema":"qinglong/worker-session@v1","workerGeneration":2}'
    with pytest.raises(WireError, match="out_of_range"):
        WorkerSessionHeartbeatRequest(worker_generation=0)
