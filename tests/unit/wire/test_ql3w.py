"""Tests of the ql3w request signature (qinglong.wire.ql3w). Touches nothing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qinglong.wire import WireError, ql3w

SECRET = b"s" * 32
KEYS = ql3w.Keyring(SECRET)
WORKER = "0f0e0d0c-0b0a-4908-8706-050403020100"
SESSION = "1f0e0d0c-0b0a-4908-8706-050403020100"
PATH = f"/api/v3/workers/{WORKER}/sessions/{SESSION}/lease-control"
NOW = 1_800_000_000


def header(
    *,
    body: bytes = b"{}",
    path: str = PATH,
    now: int = NOW,
    gen: int = 1,
    secret: bytes = SECRET,
    kid: str | None = None,
) -> str:
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
        key_id=kid,
    )


def code(header_value: str, *, body: bytes = b"{}", path: str = PATH, now: int = NOW, keys: ql3w.Keyring = KEYS) -> str:
    with pytest.raises(WireError) as caught:
        ql3w.verify(keys, ql3w.parse(header_value), "POST", path, body, now)
    return caught.value.code


def test_a_signed_request_verifies_and_names_its_session() -> None:
    cred = ql3w.parse(header())
    assert (cred.worker_id, cred.session_id, cred.generation, cred.timestamp) == (WORKER, SESSION, 1, NOW)
    assert ql3w.verify(KEYS, cred, "POST", PATH, b"{}", NOW + 60) is True


def test_a_body_path_or_method_swapped_under_a_valid_signature_is_refused() -> None:
    assert code(header(), body=b'{"a":1}') == "auth.bad_signature"
    assert code(header(), path=PATH.replace("lease-control", "heartbeat")) == "auth.bad_signature"
    with pytest.raises(WireError, match="does not verify"):
        ql3w.verify(KEYS, ql3w.parse(header()), "GET", PATH, b"{}", NOW)


def test_another_generation_or_secret_derives_another_key() -> None:
    assert code(header(secret=b"t" * 32)) == "auth.bad_signature"
    forged = header(gen=2).replace("gen=2", "gen=1")
    assert code(forged) == "auth.bad_signature"


def test_the_timestamp_window_is_sixty_seconds_either_way() -> None:
    assert code(header(now=NOW - 61)) == "auth.expired_timestamp"
    assert code(header(now=NOW + 61)) == "auth.expired_timestamp"


NEXT = b"n" * 32


def test_a_key_id_names_the_secret_that_verifies_and_says_whether_it_is_current() -> None:
    rotating = ql3w.Keyring(NEXT, accepted=SECRET)  # the new secret is current, the old one still accepted
    old, new = ql3w.key_id(SECRET), ql3w.key_id(NEXT)
    assert ql3w.KEY_ID.fullmatch(old) and old != new and rotating.current_id == new
    assert ql3w.verify(rotating, ql3w.parse(header(kid=old)), "POST", PATH, b"{}", NOW) is False  # re-key
    assert ql3w.verify(rotating, ql3w.parse(header(secret=NEXT, kid=new)), "POST", PATH, b"{}", NOW) is True
    assert ql3w.parse(header(kid=old)).key_id == old


def test_a_key_id_the_keyring_lacks_or_a_key_id_over_another_secret_is_refused() -> None:
    assert code(header(kid=ql3w.key_id(NEXT))) == "auth.bad_signature"  # KEYS holds only SECRET
    rotating = ql3w.Keyring(NEXT, accepted=SECRET)
    assert code(header(kid=ql3w.key_id(NEXT)), keys=rotating) == "auth.bad_signature"  # signed with SECRET
    with pytest.raises(WireError, match="names no secret"):
        ql3w.verify(KEYS, ql3w.parse(header(kid="A" * 12)), "POST", PATH, b"{}", NOW)


def test_a_header_without_key_id_names_the_current_secret_only() -> None:
    rotating = ql3w.Keyring(NEXT, accepted=SECRET)
    assert code(header(), keys=rotating) == "auth.bad_signature"  # signed with SECRET, which is not current
    assert ql3w.verify(rotating, ql3w.parse(header(secret=NEXT)), "POST", PATH, b"{}", NOW) is True


def test_a_keyring_reloads_in_place_and_refuses_one_secret_twice() -> None:
    keys = ql3w.Keyring(SECRET)
    keys.load(NEXT, accepted=SECRET)
    assert (keys.current, keys.secret(ql3w.key_id(SECRET))) == (NEXT, SECRET)
    with pytest.raises(ValueError, match="is the current one"):
        keys.load(NEXT, accepted=NEXT)
    assert keys.current == NEXT and keys.secret(ql3w.key_id(SECRET)) == SECRET  # unchanged by the refusal


@pytest.mark.parametrize(
    "value",
    [
        f"ql3w worker={WORKER}, session={SESSION}, gen=1, kid={'A' * 11}, ts={NOW}, sig={'A' * 43}",
        f"ql3w worker={WORKER}, session={SESSION}, gen=1, ts={NOW}, kid={'A' * 12}, sig={'A' * 43}",
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
        kid = "" if cred.key_id is None else f"kid={cred.key_id}, "
        assert value == f"ql3w worker={cred.worker_id}, session={cred.session_id}, gen={cred.generation}, " + (
            f"{kid}ts={cred.timestamp}, sig={cred.signature}"
        )
