"""Tests of the lease-control contract (qinglong.wire.lease_control). Touches nothing."""

from __future__ import annotations

from typing import Any

import pytest

from qinglong.wire import WireError, encode
from qinglong.wire.codec import MAX_SAFE_INTEGER
from qinglong.wire.lease_control import (
    LEASE_CONTROL_RESPONSES,
    LeaseControlRequest,
    LeaseRenewed,
    LeaseStopRequested,
    LeaseTerminal,
    check_lease_version,
    parse_lease_control_response,
)
from tests.unit.wire.kit import (
    TOKEN,
    UUID,
)

SCHEMA = "qinglong/remote-worker-lease-control@v1"
RENEWED = {
    "status": "renewed",
    "leaseVersion": 8,
    "renewedAtMs": 100,
    "expiresAtMs": 30_100,
    "deadlineAtMs": None,
    "stopReason": None,
    "cancelRequestedAtMs": None,
}
STOP = {**RENEWED, "status": "stop_requested", "stopReason": "timeout", "cancelRequestedAtMs": 100}
TERMINAL = {
    "status": "terminal",
    "runStatus": "succeeded",
    "attemptStatus": "succeeded",
    "exitCode": 0,
    "errorCode": None,
    "endedAtMs": 90,
}


def body(result: dict[str, Any]) -> bytes:
    return encode({"schema": SCHEMA, **result})


def test_the_dispatcher_gives_one_class_per_status() -> None:
    assert isinstance(parse_lease_control_response(body(RENEWED)), LeaseRenewed)
    stop = parse_lease_control_response(body(STOP))
    assert isinstance(stop, LeaseStopRequested) and stop.stop_reason == "timeout"
    terminal = LEASE_CONTROL_RESPONSES.from_result(TERMINAL)
    assert isinstance(terminal, LeaseTerminal) and terminal.exit_code == 0


@pytest.mark.parametrize(
    ("result", "code"),
    [
        ({**RENEWED, "stopReason": "user"}, "wire.bad_type"),  # renewed never carries a stop reason
        ({**RENEWED, "cancelRequestedAtMs": 1}, "wire.bad_type"),
        ({**STOP, "stopReason": None}, "wire.bad_type"),  # a stop request always names its reason
        ({**STOP, "cancelRequestedAtMs": None}, "wire.bad_type"),
        ({**STOP, "stopReason": "whim"}, "wire.bad_enum"),
        ({**RENEWED, "status": "fenced"}, "wire.bad_enum"),
        ({k: v for k, v in RENEWED.items() if k != "stopReason"}, "wire.missing_field"),
        ({**TERMINAL, "attemptStatus": "running"}, "wire.bad_enum"),
        ({**TERMINAL, "endedAtMs": None}, "wire.bad_type"),
        ({**TERMINAL, "leaseVersion": 1}, "wire.unknown_field"),
        ({**RENEWED, "leaseToken": TOKEN}, "wire.unknown_field"),  # never echoes the token
        ({**RENEWED, "tokenDigest": "00" * 32}, "wire.unknown_field"),
        ({"status": "fenced", "reason": "stale_version"}, "wire.bad_enum"),
    ],
)
def test_each_status_keeps_its_exact_shape(result: dict[str, Any], code: str) -> None:
    with pytest.raises(WireError) as caught:
        parse_lease_control_response(body(result))
    assert caught.value.code == code


def test_a_renewal_must_be_exactly_expected_version_plus_one() -> None:
    renewed = parse_lease_control_response(body(RENEWED), expected_version=7)
    assert isinstance(renewed, LeaseRenewed) and renewed.lease_version == 8
    for result in (RENEWED, STOP):
        for expected in (6, 8, 0):
            with pytest.raises(WireError) as caught:
                parse_lease_control_response(body(result), expected_version=expected)
            assert caught.value.code == "wire.version_mismatch"
    terminal = LeaseTerminal.from_result(TERMINAL)
    assert check_lease_version(terminal, expected_version=123) is terminal


def test_the_request_carries_the_full_fence_and_never_shows_its_token() -> None:
    request = LeaseControlRequest(
        worker_generation=1,
        project_id=UUID,
        run_id=UUID,
        attempt_id=UUID,
        offer_id=UUID,
        lease_generation=1,
        lease_token=TOKEN,
        expected_version=MAX_SAFE_INTEGER - 1,
    )
    assert set(request.to_obj()) == {
        "schema",
        "workerGeneration",
        "projectId",
        "runId",
        "attemptId",
        "offerId",
        "leaseGeneration",
        "leaseToken",
        "expectedVersion",
    }
    assert TOKEN not in repr(request) and LeaseControlRequest.CAP == 8 * 1024
    with pytest.raises(WireError, match="out_of_range"):
        LeaseControlRequest.from_obj({**request.to_obj(), "expectedVersion": MAX_SAFE_INTEGER})


def test_caps_are_8_kib_in_and_4_kib_out() -> None:
    assert LeaseControlRequest.CAP == 8192
    assert {c.CAP for c in (LeaseRenewed, LeaseStopRequested, LeaseTerminal)} == {4096}
