"""Tests of the error contract and its table of stable codes (qinglong.wire.errors). Touches nothing."""

from __future__ import annotations

import re
from typing import get_args

import pytest

from qinglong.wire import WIRE_CODES, WireError, encode, ql3w
from qinglong.wire.codec import VERSION_MISMATCH
from qinglong.wire.errors import (
    ERROR_CODES,
    ERRORS,
    FENCE_MEANINGS,
    FENCE_REASONS,
    INVALID_MEANINGS,
    INVALID_REASONS,
    ErrorMessage,
    Scope,
    error_from_wire_error,
    outcome_code,
    route_errors,
)
from qinglong.wire.fields import Token
from tests.unit.wire.kit import (
    TOKEN,
)

SCHEMA = "qinglong/error@v1"


def test_codes_are_unique_dotted_lower_case() -> None:
    assert len(set(ERROR_CODES)) == len(ERROR_CODES)
    assert all(re.fullmatch(r"[a-z_]+(\.[a-z0-9_]+)?", code) for code in ERROR_CODES)


def test_every_fence_reason_has_a_code() -> None:
    # The reasons themselves are the database's enum ql.fence_reason: tests/integration/db/test_wire_catalogue.py.
    reasons = set(FENCE_REASONS)
    assert {outcome_code({"status": "fenced", "reason": r}) for r in reasons} <= set(ERROR_CODES)
    assert outcome_code({"status": "fenced", "reason": "approval_required"}) == "approval_required"
    assert "fenced.approval_required" not in ERROR_CODES


def test_every_invalid_reason_has_a_code() -> None:
    reasons = set(INVALID_REASONS)
    assert {outcome_code({"status": "invalid", "reason": r}) for r in reasons} == {f"invalid.{r}" for r in reasons}
    assert {f"invalid.{r}" for r in reasons} <= set(ERROR_CODES)


def test_the_named_codes_are_all_there() -> None:
    named = {
        "fenced.stale_version",
        "auth.unauthenticated",
        ql3w.BAD_HEADER,
        ql3w.EXPIRED,
        "auth.certificate_mismatch",
        "request.too_large",
        "request.unsupported_media_type",
        "request.malformed",
        "request.header_too_large",
        "request.unknown_path",
        "request.method_not_allowed",
        "not_found",
        "denied",
        "approval_required",
        "storage.unavailable",
        "internal.bad_projection",
        "internal.error",
        *WIRE_CODES,
    } - {VERSION_MISMATCH}  # the Worker's own check of an answer, never an answer
    assert named <= set(ERROR_CODES)
    assert VERSION_MISMATCH not in ERROR_CODES


def test_every_code_has_an_error_status_a_one_line_meaning_and_a_scope() -> None:
    assert tuple(ERRORS) == ERROR_CODES
    for name, error in ERRORS.items():
        assert error.code == name
        assert error.status in {400, 401, 403, 404, 405, 409, 413, 415, 431, 500, 503}, name
        assert error.meaning.strip() and "\n" not in error.meaning, name
        assert error.scope in get_args(Scope), name


def test_database_outcomes_have_the_status_of_their_kind() -> None:
    assert set(FENCE_MEANINGS) == set(FENCE_REASONS)
    assert set(INVALID_MEANINGS) <= set(INVALID_REASONS)
    for reason in FENCE_REASONS:
        error = ERRORS[outcome_code({"status": "fenced", "reason": reason})]
        assert error.status == (403 if reason == "approval_required" else 409), reason
    for reason in INVALID_REASONS:
        assert ERRORS[outcome_code({"status": "invalid", "reason": reason})].status == 400, reason
    assert ERRORS[outcome_code({"status": "not_found", "reason": "offer"})].status == 404
    assert {name for name in ERRORS if ERRORS[name].status == 409} == {f"fenced.{r}" for r in FENCE_REASONS} - {
        "fenced.approval_required"
    }


def test_which_routes_can_answer_a_code() -> None:
    def codes(audience: str, body: bool) -> set[str]:
        return {error.code for error in route_errors(audience, body=body)}

    everywhere = {"wire.bad_uuid", "not_found", "fenced.stale_version", "invalid.run_id", "internal.error"}
    assert everywhere <= codes("user", False) & codes("worker-open", True) & codes("worker", True)
    read = {ERRORS[c].status for c in codes("user", False)}
    assert read == {400, 401, 403, 404, 409, 431, 500, 503}  # no 413 or 415 without a body
    listener = {"request.malformed", "request.header_too_large", "request.unknown_path"}  # before any route decides
    assert listener <= codes("user", False) & codes("worker-open", False) & codes("worker", False)
    unrouted = {code for code, error in ERRORS.items() if error.scope == "unrouted"}
    assert unrouted == {"request.method_not_allowed"}  # answered where no route is: listed under none
    for audience in ("user", "worker-open", "worker"):
        assert not unrouted & codes(audience, True)
    assert {"request.too_large", "wire.too_large", "wire.unknown_field"} <= codes("user", True) - codes("user", False)
    assert {ql3w.BAD_HEADER, ql3w.EXPIRED} <= codes("worker", True) - codes("worker-open", True)
    assert "auth.certificate_mismatch" in codes("worker-open", True) - codes("user", True)
    assert {"auth.unauthenticated", "denied", "approval_required"} <= codes("user", True) - codes("worker", True)


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
