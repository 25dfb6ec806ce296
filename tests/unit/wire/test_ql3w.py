"""Tests of the ql3w request signature (qinglong.wire.ql3w). Touches nothing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qinglong.wire import WireError, ql3w

SECRET = b"s" * 32
WORKER = "0f0e0d0c-0b0a-4908-8706-050403020100"
SESSION = "1f0e0d0c-0b0a-4908-8706-050403020100"
PATH = f"/api/v3/workers/{WORKER}/sessions/{SESSION}/lease-control"
NOW = 1_800_000_000


def header(*, body: bytes = b"{}", path: str = PATH, now: int = NOW, gen: int = 1, secret: bytes = SECRET) -> str:
    key = ql3w.session_key(secret, SESSION, WORKER, gen)
    return ql3w.authorization(
        key,
        worker_id=WORKER,
        session_id=SESSION,
        generation=gen,
        method="POST",
        path=path,
        body=body,
        now=now,
    )


def code(header_value: str, *, body: bytes = b"{}", path: str = PATH, now: int = NOW) -> str:
    with pytest.raises(WireError) as caught:
        ql3w.verify(SECRET, ql3w.parse(header_value), "POST", path, body, now)
    return caught.value.code


def test_a_signed_request_verifies_and_names_its_session() -> None:
    cred = ql3w.parse(header())
    assert (cred.worker_id, cred.session_id, cred.generation, cred.timestamp) == (WORKER, SESSION, 1, NOW)
    ql3w.verify(SECRET, cred, "POST", PATH, b"{}", NOW + 60)


def test_a_body_path_or_method_swapped_under_a_valid_signature_is_refused() -> None:
    assert code(header(), body=b'{"a":1}') == "auth.bad_signature"
    assert code(header(), path=PATH.replace("lease-control", "heartbeat")) == "auth.bad_signature"
    with pytest.raises(WireError, match="does not verify"):
        ql3w.verify(SECRET, ql3w.parse(header()), "GET", PATH, b"{}", NOW)


def test_another_generation_or_secret_derives_another_key() -> None:
    assert code(header(secret=b"t" * 32)) == "auth.bad_signature"
    forged = header(gen=2).replace("gen=2", "gen=1")
    assert code(forged) == "auth.bad_signature"


def test_the_timestamp_window_is_sixty_seconds_either_way() -> None:
    assert code(header(now=NOW - 61)) == "auth.expired_timestamp"
    assert code(header(now=NOW + 61)) == "auth.expired_timestamp"


@pytest.mark.parametrize(
    "value",
    [
        "",
        "Bearer x",
        f"ql3w worker={WORKER}, session={SESSION}, ts={NOW}, sig={'A' * 43}",
        f"ql3w worker={WORKER.upper()}, session={SESSION}, gen=1, ts={NOW}, sig={'A' * 43}",
        f"ql3w worker={WORKER}, session={SESSION}, gen=0, ts={NOW}, sig={'A' * 43}",
        f"ql3w worker={WORKER}, session={SESSION}, gen=1, ts={NOW}, sig={'A' * 44}",
        f"ql3w  worker={WORKER}, session={SESSION}, gen=1, ts={NOW}, sig={'A' * 43}",
    ],
)
def test_a_malformed_header_is_refused_exactly(value: str) -> None:
    with pytest.raises(WireError, match="malformed"):
        ql3w.parse(value)


@given(st.text(max_size=300))
def test_parse_raises_nothing_but_wire_errors(value: str) -> None:
    try:
        cred = ql3w.parse(value)
    except WireError as exc:
        assert exc.code == "auth.bad_signature"
    else:
        assert value == f"ql3w worker={cred.worker_id}, session={cred.session_id}, gen={cred.generation}, " + (
            f"ts={cred.timestamp}, sig={cred.signature}"
        )
