"""Tests of the activation contract (qinglong.wire.activation). Touches nothing. (Its agreement with the
SQL results: tests/integration/db/test_result_shapes.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from qinglong.wire import WireError, encode
from qinglong.wire.activation import (
    ActivationRequest,
    ActivationResponse,
    ActivationStartFailureRequest,
    Snapshot,
)
from qinglong.wire.codec import MAX_SAFE_INTEGER
from qinglong.wire.fields import Enum, Token
from tests.unit.wire.kit import (
    TOKEN,
    UUID,
)

SCHEMA = "qinglong/remote-run-activation@v1"


def snapshot(**changes: Any) -> dict[str, Any]:
    snap: dict[str, Any] = {
        "projectId": UUID,
        "runId": UUID,
        "attemptId": UUID,
        "offerId": UUID,
        "attemptNo": 1,
        "runStatus": "running",
        "attemptStatus": "starting",
        "attemptVersion": 2,
        "leaseGeneration": 1,
        "leaseVersion": 1,
        "leaseExpiresAtMs": 10,
        "callbackSequence": 1,
        "deadlineAtMs": 1000,
        "startedAtMs": 5,
        "runningAtMs": None,
        "endedAtMs": None,
        "exitCode": None,
        "errorCode": None,
        "cancelRequestedAtMs": None,
        "cancelReason": None,
        "executor": {"kind": "process", "version": 1},
        "artifacts": [],
    }
    return {**snap, **changes}


def fence(**changes: Any) -> dict[str, Any]:
    body = {
        "schema": SCHEMA,
        "workerGeneration": 1,
        "projectId": UUID,
        "runId": UUID,
        "attemptId": UUID,
        "leaseGeneration": 1,
        "leaseToken": TOKEN,
    }
    return {**body, **changes}


def test_the_response_never_carries_a_token() -> None:
    def tokens(cls: type[Any]) -> list[str]:
        return [f.name for f in cls.FIELDS if isinstance(f.spec, Token)]

    assert tokens(ActivationResponse) == tokens(Snapshot) == []
    with pytest.raises(WireError, match="unknown_field"):
        ActivationResponse.from_result({"status": "applied", "snapshot": snapshot(leaseToken=TOKEN)})


def test_a_full_snapshot_fits_the_16_kib_cap() -> None:
    receipt = {"artifactId": UUID, "kind": "log", "sha256": "f" * 64, "size": 8 * 1024 * 1024}
    big = snapshot(
        attemptNo=100,
        attemptVersion=MAX_SAFE_INTEGER,
        leaseVersion=MAX_SAFE_INTEGER,
        errorCode="e" * 64,
        exitCode=255,
        cancelRequestedAtMs=MAX_SAFE_INTEGER,
        cancelReason="reconcile",
        artifacts=[receipt, {**receipt, "kind": "result"}],
    )
    body = encode({"schema": SCHEMA, "status": "already_terminal", "snapshot": big})
    assert len(body) < ActivationResponse.CAP == 16 * 1024
    assert ActivationResponse.parse(body).snapshot.artifacts[1].kind == "result"


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"runStatus": "done"}, "wire.bad_enum"),
        ({"cancelReason": "whim"}, "wire.bad_enum"),
        ({"cancelRequestedAtMs": -1}, "wire.out_of_range"),
        ({"attemptStatus": "RUNNING"}, "wire.bad_enum"),
        ({"executor": {"kind": "docker", "version": 1}}, "wire.bad_enum"),
        ({"executor": None}, "wire.bad_type"),
        ({"exitCode": 256}, "wire.out_of_range"),
        ({"errorCode": "Bad"}, "wire.bad_pattern"),
        ({"deadlineAtMs": -1}, "wire.out_of_range"),
        ({"callbackSequence": 2**31}, "wire.out_of_range"),
        (
            {"artifacts": [{"artifactId": UUID, "kind": "log", "sha256": "F" * 64, "size": 1}]},
            "wire.bad_pattern",
        ),
        ({"artifacts": None}, "wire.bad_type"),
    ],
)
def test_snapshot_bounds(changes: dict[str, Any], code: str) -> None:
    with pytest.raises(WireError) as caught:
        ActivationResponse.from_obj({"schema": SCHEMA, "status": "applied", "snapshot": snapshot(**changes)})
    assert caught.value.code == code


def test_starting_and_running_send_the_fence_and_start_failure_adds_its_error_code() -> None:
    assert ActivationRequest.from_obj(fence()).lease_token == TOKEN
    failure = ActivationStartFailureRequest.from_obj(fence(errorCode="spawn.enoent"))
    assert failure.error_code == "spawn.enoent" and TOKEN not in repr(failure)
    cases: list[tuple[type[ActivationRequest | ActivationStartFailureRequest], dict[str, Any], str]] = [
        (ActivationRequest, fence(errorCode="x"), "wire.unknown_field"),
        (ActivationRequest, fence(offerId=UUID), "wire.unknown_field"),
        (ActivationStartFailureRequest, fence(), "wire.missing_field"),
        (ActivationStartFailureRequest, fence(errorCode=None), "wire.bad_type"),
        (ActivationStartFailureRequest, fence(errorCode="x" * 65), "wire.too_long"),
        (ActivationStartFailureRequest, fence(errorCode="no spaces"), "wire.bad_pattern"),
        (ActivationRequest, fence(leaseToken=TOKEN + "="), "wire.bad_base64"),
    ]
    for cls, body, code in cases:
        with pytest.raises(WireError) as caught:
            cls.from_obj(body)
        assert caught.value.code == code, (cls, body)


def test_status_values_are_enums() -> None:
    assert isinstance(ActivationResponse.field("status").spec, Enum)
