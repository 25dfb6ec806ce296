"""Tests of qinglong/remote-offer@v1 (qinglong.wire.offer). Touches nothing."""

from __future__ import annotations

from typing import Any

import pytest

from qinglong.wire import WireError, encode
from qinglong.wire.offer import (
    ARG_MAX_CHARS,
    ARGV_MAX_ITEMS,
    ENV_MAX_ENTRIES,
    OFFER_RESPONSES,
    OfferEmpty,
    OfferOffered,
    OfferPullRequest,
    Plan,
    parse_offer_response,
)
from tests.unit.wire.kit import (
    TOKEN,
    UUID,
)


def offer(**plan: Any) -> dict[str, Any]:
    return {
        "offerId": UUID,
        "projectId": UUID,
        "runId": UUID,
        "attemptId": UUID,
        "attemptNo": 1,
        "leaseGeneration": 1,
        "leaseVersion": 1,
        "offeredAtMs": 1,
        "leaseExpiresAtMs": 2,
        "offerExpiresAtMs": 2,
        "plan": {"argv": ["/bin/true"], **plan},
    }


def offered(**plan: Any) -> bytes:
    return encode(
        {
            "schema": "qinglong/remote-offer@v1",
            "status": "offered",
            "offer": offer(**plan),
            "leaseToken": TOKEN,
        }
    )


def code_of(data: bytes) -> str:
    with pytest.raises(WireError) as caught:
        parse_offer_response(data)
    return caught.value.code


def test_the_offered_response_carries_the_lease_token_beside_the_offer() -> None:
    msg = OfferOffered.from_result({"status": "offered", "offer": offer()}, leaseToken=TOKEN)
    assert msg.lease_token == TOKEN and TOKEN not in repr(msg)
    assert parse_offer_response(msg.to_json()) == msg


def test_absent_plan_keys_stay_absent() -> None:
    msg = parse_offer_response(offered())
    assert isinstance(msg, OfferOffered)
    assert msg.offer.plan == Plan(argv=("/bin/true",)) and msg.offer.plan.timeout_ms is None
    assert msg.to_json() == offered()
    full = offered(env={"A": "1"}, timeoutMs=5, maxAttempts=2, retryBackoffMs=0, pool="default")
    assert parse_offer_response(full).to_json() == full


@pytest.mark.parametrize(
    ("plan", "code"),
    [
        ({"argv": []}, "wire.too_short"),
        ({"argv": ["x"] * (ARGV_MAX_ITEMS + 1)}, "wire.too_long"),
        ({"argv": ["x" * (ARG_MAX_CHARS + 1)]}, "wire.too_long"),
        ({"argv": [1]}, "wire.bad_type"),
        ({"argv": "x"}, "wire.bad_type"),
        ({"env": {f"K{i}": "" for i in range(ENV_MAX_ENTRIES + 1)}}, "wire.too_long"),
        ({"env": {"A=B": "x"}}, "wire.bad_pattern"),
        ({"env": {"": "x"}}, "wire.too_short"),
        ({"env": {"A": 1}}, "wire.bad_type"),
        ({"env": None}, "wire.bad_type"),
        ({"timeoutMs": 0}, "wire.out_of_range"),
        ({"timeoutMs": 2**31}, "wire.out_of_range"),
        ({"timeoutMs": None}, "wire.bad_type"),
        ({"timeoutMs": 1.0}, "wire.bad_type"),
        ({"maxAttempts": 101}, "wire.out_of_range"),
        ({"retryBackoffMs": -1}, "wire.out_of_range"),
        ({"pool": "Default"}, "wire.bad_pattern"),
        ({"pool": ""}, "wire.too_short"),
        ({"shell": True}, "wire.unknown_field"),
        ({"cwd": ""}, "wire.too_short"),
        ({"cwd": "x" * 4097}, "wire.too_long"),
        ({"cwd": 1}, "wire.bad_type"),
        ({"user": "Root"}, "wire.bad_pattern"),
        ({"user": "1000"}, "wire.bad_pattern"),
        ({"user": "a" * 33}, "wire.too_long"),
        ({"group": "a b"}, "wire.bad_pattern"),
        ({"group": None}, "wire.bad_type"),
    ],
)
def test_plan_bounds(plan: dict[str, Any], code: str) -> None:
    assert code_of(offered(**plan)) == code


def test_plan_bounds_are_inclusive() -> None:
    edge = offered(argv=["x" * 100] * ARGV_MAX_ITEMS, timeoutMs=2**31 - 1, maxAttempts=100, pool="a" * 64)
    assert isinstance(parse_offer_response(edge), OfferOffered)
    assert parse_offer_response(offered(argv=["x" * ARG_MAX_CHARS])).to_json() == offered(argv=["x" * ARG_MAX_CHARS])
    asked = offered(cwd="/" + "x" * 4095, user="_" + "a" * 31, group="nogroup")
    assert parse_offer_response(asked).to_json() == asked


def test_an_env_value_never_appears_in_an_error() -> None:
    with pytest.raises(WireError) as caught:
        parse_offer_response(offered(env={"SECRET": "hunter2\x00"}))
    assert "hunter2" not in str(caught.value) and "SECRET" not in str(caught.value)


def test_the_pull_request_is_the_schema_and_the_pull_id() -> None:
    assert OfferPullRequest(pull_id=UUID).to_json() == b'{"pullId":"%s","schema":"qinglong/remote-offer@v1"}' % (
        UUID.encode()
    )
    with pytest.raises(WireError, match="unknown_field"):
        OfferPullRequest.parse(
            b'{"pullId":"%s","schema":"qinglong/remote-offer@v1","workerGeneration":1}' % UUID.encode()
        )
    with pytest.raises(WireError, match="missing_field"):
        OfferPullRequest.parse(b'{"schema":"qinglong/remote-offer@v1"}')
    with pytest.raises(WireError, match=r"bad_pattern|bad_uuid"):
        OfferPullRequest.parse(b'{"pullId":"not-a-uuid","schema":"qinglong/remote-offer@v1"}')
    assert OFFER_RESPONSES.from_result({"status": "empty", "reason": "pull_spent"}) == OfferEmpty(reason="pull_spent")


def test_the_offered_response_needs_its_token_and_the_empty_one_refuses_one() -> None:
    tokenless = {"schema": "qinglong/remote-offer@v1", "status": "offered", "offer": offer()}
    assert code_of(encode(tokenless)) == "wire.missing_field"
    empty = b'{"leaseToken":"%s","reason":"no_work","schema":"qinglong/remote-offer@v1","status":"empty"}'
    assert code_of(empty % TOKEN.encode()) == "wire.unknown_field"
