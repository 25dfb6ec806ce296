"""Tests of the cancellation contract (qinglong.wire.cancellation). Touches nothing."""

from __future__ import annotations

from typing import Any

import pytest

from qinglong.wire import WireError, encode
from qinglong.wire.cancellation import (
    CancellationAccepted,
    CancellationAlreadyRequested,
    CancellationAlreadyTerminal,
    CancellationRequest,
    parse_cancellation_response,
)
from tests.unit.wire.kit import (
    UUID,
)

SCHEMA = "qinglong/run-cancellation@v1"


def request(mutation_id: object) -> bytes:
    return encode({"schema": SCHEMA, "mutationId": mutation_id})


@pytest.mark.parametrize("mutation_id", ["a", "A-Z_a.z:0-9", "x" * 128, "2026-12-02T13:00:00Z"])
def test_mutation_ids_of_1_to_128_safe_characters_pass(mutation_id: str) -> None:
    assert CancellationRequest.parse(request(mutation_id)).mutation_id == mutation_id


@pytest.mark.parametrize(
    ("mutation_id", "code"),
    [
        ("", "wire.too_short"),
        ("x" * 129, "wire.too_long"),
        ("a b", "wire.bad_pattern"),
        ("a/b", "wire.bad_pattern"),
        ("é", "wire.bad_pattern"),
        ("a\n", "wire.control_character"),
        (1, "wire.bad_type"),
        (None, "wire.bad_type"),
    ],
)
def test_other_mutation_ids_are_refused(mutation_id: object, code: str) -> None:
    with pytest.raises(WireError) as caught:
        CancellationRequest.parse(request(mutation_id))
    assert caught.value.code == code


def test_callers_cannot_choose_a_reason() -> None:
    with pytest.raises(WireError, match="unknown_field"):
        CancellationRequest.parse(encode({"schema": SCHEMA, "mutationId": "m", "reason": "timeout"}))


def response(**fields: Any) -> bytes:
    return encode({"schema": SCHEMA, "runId": UUID, **fields})


@pytest.mark.parametrize(
    ("fields", "cls"),
    [
        (
            {"status": "accepted", "runStatus": "queued", "cancelRequestedAtMs": 5, "reason": "user"},
            CancellationAccepted,
        ),
        (
            {
                "status": "already_requested",
                "runStatus": "running",
                "cancelRequestedAtMs": 5,
                "reason": "timeout",
            },
            CancellationAlreadyRequested,
        ),
        (
            {
                "status": "already_terminal",
                "runStatus": "succeeded",
                "cancelRequestedAtMs": None,
                "reason": None,
            },
            CancellationAlreadyTerminal,
        ),
        (
            {
                "status": "already_terminal",
                "runStatus": "cancelled",
                "cancelRequestedAtMs": 5,
                "reason": "user",
            },
            CancellationAlreadyTerminal,
        ),
    ],
)
def test_each_status_parses_into_its_class(fields: dict[str, Any], cls: type[Any]) -> None:
    assert type(parse_cancellation_response(response(**fields))) is cls


@pytest.mark.parametrize(
    "fields",
    [
        # accepted: this call wrote the intent, so its reason is user and the Run has not ended
        {"status": "accepted", "runStatus": "running", "cancelRequestedAtMs": 5, "reason": "timeout"},
        {"status": "accepted", "runStatus": "cancelled", "cancelRequestedAtMs": 5, "reason": "user"},
        {"status": "accepted", "runStatus": "running", "cancelRequestedAtMs": None, "reason": "user"},
        {"status": "already_requested", "runStatus": "running", "cancelRequestedAtMs": None, "reason": None},
        {
            "status": "already_requested",
            "runStatus": "timed_out",
            "cancelRequestedAtMs": 5,
            "reason": "timeout",
        },
        {"status": "already_terminal", "runStatus": "running", "cancelRequestedAtMs": None, "reason": None},
        {"status": "already_terminal", "runStatus": "failed", "reason": None},
        {"status": "rejected", "runStatus": "running", "cancelRequestedAtMs": 5, "reason": "user"},
    ],
)
def test_each_status_keeps_its_exact_shape(fields: dict[str, Any]) -> None:
    with pytest.raises(WireError):
        parse_cancellation_response(response(**fields))
