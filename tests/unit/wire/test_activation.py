"""Tests of the activation contract (qinglong.wire.activation), the secrets a starting ACK delivers included.
Touches nothing. (Its agreement with the SQL results: tests/integration/db/test_result_shapes.py.)"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from qinglong.wire import WireError, encode
from qinglong.wire.activation import (
    ActivationRequest,
    ActivationResponse,
    ActivationStartFailureRequest,
    DeliveredSecret,
    Snapshot,
)
from qinglong.wire.codec import MAX_SAFE_INTEGER
from qinglong.wire.common import SECRET_REFS_MAX, SECRET_VALUE_MAX_BYTES
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


def full_snapshot() -> dict[str, Any]:
    """The largest snapshot the contract admits."""
    receipt = {"artifactId": UUID, "kind": "log", "sha256": "f" * 64, "size": 8 * 1024 * 1024}
    return snapshot(
        attemptNo=100,
        attemptVersion=MAX_SAFE_INTEGER,
        leaseVersion=MAX_SAFE_INTEGER,
        errorCode="e" * 64,
        exitCode=255,
        cancelRequestedAtMs=MAX_SAFE_INTEGER,
        cancelReason="reconcile",
        artifacts=[receipt, {**receipt, "kind": "result"}],
    )


def test_a_full_snapshot_fits_16_kib() -> None:
    body = encode({"schema": SCHEMA, "status": "already_terminal", "snapshot": full_snapshot()})
    assert len(body) < 16 * 1024 < ActivationResponse.CAP
    assert ActivationResponse.parse(body).snapshot.artifacts[1].kind == "result"


def test_a_full_snapshot_and_sixteen_secrets_of_64_kib_fit_the_cap() -> None:
    value = b"\xff" * SECRET_VALUE_MAX_BYTES
    secrets = [
        {"name": f"S{n:02d}" + "X" * 61, "version": MAX_SAFE_INTEGER, "value": base64.b64encode(value).decode()}
        for n in range(SECRET_REFS_MAX)
    ]
    body = encode({"schema": SCHEMA, "status": "applied", "snapshot": full_snapshot(), "secrets": secrets})
    assert len(body) <= ActivationResponse.CAP
    parsed = ActivationResponse.parse(body)
    assert parsed.secrets is not None and len(parsed.secrets) == SECRET_REFS_MAX
    assert {len(s.name) for s in parsed.secrets} == {64} and parsed.secrets[0].value == value
    # and a seventeenth is refused
    over = {"schema": SCHEMA, "status": "applied", "snapshot": snapshot(), "secrets": [*secrets[:1]] * 17}
    with pytest.raises(WireError) as caught:
        ActivationResponse.from_obj(over)
    assert caught.value.code == "wire.too_long"


def test_an_answer_without_secrets_is_the_one_before_secrets() -> None:
    """Old Workers keep working: no `secrets` key at all (never null, never []) unless a starting ACK delivers."""
    result = {"status": "applied", "snapshot": snapshot()}
    message = ActivationResponse.from_result(result)
    assert message.secrets is None
    assert message.to_json() == encode({**result, "schema": SCHEMA})
    with pytest.raises(WireError) as caught:
        ActivationResponse.from_obj({"schema": SCHEMA, **result, "secrets": None})
    assert caught.value.code == "wire.bad_type"


def test_a_delivered_value_never_shows_in_repr_or_errors() -> None:
    value = b"hunter2-the-delivered-value"
    encoded = base64.b64encode(value).decode()
    answer = ActivationResponse.from_obj(
        {"schema": SCHEMA, "status": "already_starting", "snapshot": snapshot(),
         "secrets": [{"name": "DB_PASSWORD", "version": 3, "value": encoded}]}
    )  # fmt: skip
    assert answer.secrets == (DeliveredSecret(name="DB_PASSWORD", version=3, value=value),)
    assert "hunter2" not in repr(answer) and encoded not in repr(answer)
    assert DeliveredSecret.field("value").secret
    bad = [
        {"name": "db_password", "version": 1, "value": encoded},  # not an environment-variable name
        {"name": "DB_PASSWORD", "version": 0, "value": encoded},
        {"name": "DB_PASSWORD", "version": 1, "value": encoded.rstrip("=") + "!"},
        {"name": "DB_PASSWORD", "version": 1, "value": ""},  # a value is at least one byte
        {"name": "DB_PASSWORD", "version": 1, "value": encoded, "versionId": UUID},  # sealed fields never pass
    ]
    for item in bad:
        with pytest.raises(WireError) as caught:
            ActivationResponse.from_obj({"schema": SCHEMA, "status": "applied", "snapshot": snapshot(),
                                         "secrets": [item]})  # fmt: skip
        assert "hunter2" not in str(caught.value) and encoded not in str(caught.value)


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
    failure = ActivationStartFailureRequest.from_obj(fence(errorCode="spawn.os_error"))
    assert (failure.error_code, failure.error_message) == ("spawn.os_error", None) and TOKEN not in repr(failure)
    said = ActivationStartFailureRequest.from_obj(fence(errorCode="plan.root_not_allowed", errorMessage="m" * 200))
    assert said.to_obj()["errorMessage"] == "m" * 200 and "errorMessage" not in failure.to_obj()
    cases: list[tuple[type[ActivationRequest | ActivationStartFailureRequest], dict[str, Any], str]] = [
        (ActivationRequest, fence(errorCode="x"), "wire.unknown_field"),
        (ActivationRequest, fence(offerId=UUID), "wire.unknown_field"),
        (ActivationStartFailureRequest, fence(), "wire.missing_field"),
        (ActivationStartFailureRequest, fence(errorCode=None), "wire.bad_type"),
        (ActivationStartFailureRequest, fence(errorCode="x" * 65), "wire.bad_enum"),
        (ActivationStartFailureRequest, fence(errorCode="no spaces"), "wire.bad_enum"),
        (ActivationStartFailureRequest, fence(errorCode="spawn.enoent"), "wire.bad_enum"),  # not in the catalogue
        (ActivationStartFailureRequest, fence(errorCode="start.failed", errorMessage=""), "wire.too_short"),
        (ActivationStartFailureRequest, fence(errorCode="start.failed", errorMessage="m" * 201), "wire.too_long"),
        (ActivationStartFailureRequest, fence(errorCode="start.failed", errorMessage="a\nb"), "wire.control_character"),
        (ActivationStartFailureRequest, fence(errorCode="start.failed", errorMessage=None), "wire.bad_type"),
        (ActivationRequest, fence(errorMessage="m"), "wire.unknown_field"),
        (ActivationRequest, fence(leaseToken=TOKEN + "="), "wire.bad_base64"),
    ]
    for cls, body, code in cases:
        with pytest.raises(WireError) as caught:
            cls.from_obj(body)
        assert caught.value.code == code, (cls, body)


def test_status_values_are_enums() -> None:
    assert isinstance(ActivationResponse.field("status").spec, Enum)
