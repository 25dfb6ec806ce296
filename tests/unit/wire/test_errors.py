"""Tests of the error contract and its stable codes (qinglong.wire.errors). Touches nothing; reads SQL."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qinglong.wire import WIRE_CODES, WireError, encode
from qinglong.wire.errors import (
    ERROR_CODES,
    FENCE_REASONS,
    INVALID_REASONS,
    MESSAGES,
    ErrorMessage,
    error_from_wire_error,
    outcome_code,
)
from qinglong.wire.fields import Token
from tests.unit.wire.kit import (
    FAST,
    FEW,
    FUZZ,
    TOKEN,
    Mutation,
    assert_only_wire_errors,
    assert_round_trip,
    check_json_ish,
    check_mutation,
    messages,
    mutation_kinds,
    sql_outcomes,
)

SCHEMA = "qinglong/error@v1"


def test_codes_are_unique_dotted_lower_case() -> None:
    assert len(set(ERROR_CODES)) == len(ERROR_CODES)
    assert all(re.fullmatch(r"[a-z_]+(\.[a-z0-9_]+)?", code) for code in ERROR_CODES)


def test_every_fence_reason_the_routed_sql_returns_has_a_code() -> None:
    reasons = sql_outcomes("fenced")
    assert {"stale_version", "completion_conflict", "state_drift", "approval_required"} <= reasons
    assert reasons == set(FENCE_REASONS)
    assert {outcome_code({"status": "fenced", "reason": r}) for r in reasons} <= set(ERROR_CODES)
    assert outcome_code({"status": "fenced", "reason": "approval_required"}) == "approval_required"
    assert "fenced.approval_required" not in ERROR_CODES


def test_every_invalid_reason_the_routed_sql_returns_has_a_code() -> None:
    reasons = sql_outcomes("invalid")
    assert {"worker_id", "lease_generation", "sha256_mismatch"} <= reasons
    assert reasons == set(INVALID_REASONS)
    assert {f"invalid.{r}" for r in reasons} <= set(ERROR_CODES)


def test_the_named_codes_are_all_there() -> None:
    named = {
        "fenced.stale_version",
        "auth.bad_signature",
        "auth.expired_timestamp",
        "auth.unknown_session",
        "auth.certificate_mismatch",
        "request.too_large",
        "request.unsupported_media_type",
        "request.malformed",
        "not_found",
        "denied",
        "approval_required",
        "storage.unavailable",
        "internal.bad_projection",
        *WIRE_CODES,
    }
    assert named <= set(ERROR_CODES)


def test_database_outcomes_map_to_codes() -> None:
    assert outcome_code({"status": "fenced", "reason": "stale_version"}) == "fenced.stale_version"
    assert outcome_code({"status": "invalid", "reason": "sha256_mismatch"}) == "invalid.sha256_mismatch"
    assert outcome_code({"status": "not_found", "reason": "offer"}) == "not_found"
    for bad in ({"status": "fenced", "reason": "new_reason"}, {"status": "empty", "reason": "no_work"}, {}):
        with pytest.raises(WireError, match="bad_enum"):
            outcome_code(bad)


def test_the_error_body_has_a_known_code_a_short_message_and_maybe_a_request_id() -> None:
    msg = ErrorMessage(code="fenced.stale_version", message="stale lease version")
    assert msg.to_json() == (
        b'{"code":"fenced.stale_version","message":"stale lease version","schema":"qinglong/error@v1"}'
    )
    with_id = ErrorMessage.parse(encode({**msg.to_obj(), "requestId": "req-1"}))
    assert with_id.request_id == "req-1"
    for obj, code in [
        ({**msg.to_obj(), "code": "fenced.whatever"}, "wire.bad_enum"),
        ({**msg.to_obj(), "message": "m" * 201}, "wire.too_long"),
        ({**msg.to_obj(), "message": ""}, "wire.too_short"),
        ({**msg.to_obj(), "requestId": None}, "wire.bad_type"),
        ({**msg.to_obj(), "requestId": "a b"}, "wire.bad_pattern"),
        ({**msg.to_obj(), "detail": "x"}, "wire.unknown_field"),
    ]:
        with pytest.raises(WireError) as caught:
            ErrorMessage.parse(encode(obj))
        assert caught.value.code == code


def test_a_wire_error_becomes_an_error_body_without_the_offending_value() -> None:
    secret = TOKEN
    try:
        ErrorMessage.parse(encode({"schema": SCHEMA, "code": secret, "message": "x"}))
    except WireError as error:
        body = error_from_wire_error(error, request_id="r1")
    assert body.code == "wire.bad_enum" and body.request_id == "r1"
    assert secret not in body.to_json().decode()


def test_the_error_message_carries_no_secret_field() -> None:
    assert not [f for f in ErrorMessage.FIELDS if isinstance(f.spec, Token) or f.secret]


@FAST
@given(msg=messages(MESSAGES))
def test_every_valid_message_round_trips(msg: ErrorMessage) -> None:
    assert_round_trip(msg)


@pytest.mark.parametrize("kind", mutation_kinds(MESSAGES))
@FEW
@given(data=st.data())
def test_every_mutation_is_refused(kind: Mutation, data: st.DataObject) -> None:
    check_mutation(data, MESSAGES, kind)


@FAST
@given(data=st.binary(max_size=512))
def test_arbitrary_bytes_raise_only_wire_errors(data: bytes) -> None:
    for cls in MESSAGES:
        assert_only_wire_errors(cls, data)


@FUZZ
@given(data=st.data())
def test_arbitrary_json_raises_only_wire_errors(data: st.DataObject) -> None:
    check_json_ish(data, MESSAGES)
