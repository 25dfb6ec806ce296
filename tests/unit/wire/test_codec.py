"""Tests of strict decoding and canonical encoding (qinglong.wire.codec). Touches nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qinglong.wire.codec import MAX_DEPTH, MAX_SAFE_INTEGER, WIRE_CODES, WireError, decode, encode
from tests.unit.wire.kit import FAST, JSON_ISH, SAFE_CHARS


def code_of(data: bytes, cap: int = 4096) -> str:
    with pytest.raises(WireError) as caught:
        decode(data, cap=cap)
    assert caught.value.code in WIRE_CODES
    return caught.value.code


def test_a_plain_object_decodes() -> None:
    assert decode(b' {"a": [1, -2, "x", null, true, {"b": 1.5}]} ', cap=100) == {
        "a": [1, -2, "x", None, True, {"b": 1.5}]
    }


def test_the_cap_is_checked_before_decoding() -> None:
    assert code_of(b"{}" + b" " * 9, cap=10) == "wire.too_large"
    assert code_of(b"\xff" * 11, cap=10) == "wire.too_large"  # never looked at
    assert decode(b"{}" + b" " * 8, cap=10) == {}


@pytest.mark.parametrize(
    "data",
    [b'{"a":"\xff"}', b'{"a":"\xc0\xaf"}', b'{"a":"\xed\xa0\x80"}', b'{"a":"\x80"}', b'{"a":"\xe2\x82"}'],
)
def test_invalid_utf8_is_refused(data: bytes) -> None:
    assert code_of(data) == "wire.invalid_utf8"


@pytest.mark.parametrize("escape", [b"\\ud800", b"\\udfff", b"\\udc00\\ud800", b"x\\ud83d"])
def test_lone_surrogates_written_as_escapes_are_not_utf8(escape: bytes) -> None:
    assert code_of(b'{"a":"' + escape + b'"}') == "wire.invalid_utf8"
    assert code_of(b'{"' + escape + b'":1}') == "wire.invalid_utf8"


def test_an_escaped_surrogate_pair_is_one_valid_character() -> None:
    assert decode(b'{"a":"\\ud83d\\ude00"}', cap=100) == {"a": "\U0001f600"}


@pytest.mark.parametrize(
    "data",
    [b'{"a":1,"a":1}', b'{"a":{"b":1,"b":2}}', b'{"a":[{"c":1},{"c":1,"c":1}]}', b'{"x":1,"y":2,"x":1}'],
)
def test_duplicate_keys_are_refused_at_any_depth(data: bytes) -> None:
    assert code_of(data) == "wire.duplicate_key"


@pytest.mark.parametrize("constant", [b"NaN", b"Infinity", b"-Infinity"])
def test_nan_and_the_infinities_are_not_json(constant: bytes) -> None:
    assert code_of(b'{"a":' + constant + b"}") == "wire.invalid_json"
    assert code_of(b'{"a":[' + constant + b"]}") == "wire.invalid_json"


def test_integers_stay_within_plus_minus_2_53_minus_1() -> None:
    assert decode(b'{"a":9007199254740991,"b":-9007199254740991}', cap=100) == {
        "a": MAX_SAFE_INTEGER,
        "b": -MAX_SAFE_INTEGER,
    }
    assert code_of(b'{"a":9007199254740992}') == "wire.out_of_range"
    assert code_of(b'{"a":-9007199254740992}') == "wire.out_of_range"
    assert code_of(b'{"a":' + b"9" * 5000 + b"}", cap=10_000) == "wire.out_of_range"  # no int() DoS
    assert code_of(b'{"a":1e400}') == "wire.out_of_range"


@pytest.mark.parametrize("data", [b"[]", b"1", b'"x"', b"null", b"true", b"[{}]", b"-0", b"1.5"])
def test_the_top_level_is_an_object(data: bytes) -> None:
    assert code_of(data) == "wire.not_object"


@pytest.mark.parametrize("data", [b"", b" ", b"{", b"{}{}", b"{'a':1}", b'{"a":1,}', b"\xef\xbb\xbf{}", b'{"a":01}'])
def test_malformed_json_is_refused(data: bytes) -> None:
    assert code_of(data) == "wire.invalid_json"


def test_nesting_is_capped_and_deep_input_never_overflows_the_stack() -> None:
    ok = b'{"a":' * (MAX_DEPTH - 1) + b"{}" + b"}" * (MAX_DEPTH - 1)
    assert decode(ok, cap=1000)
    assert code_of(b'{"a":' * MAX_DEPTH + b"{}" + b"}" * MAX_DEPTH) == "wire.too_deep"
    assert code_of(b'{"a":' + b"[" * MAX_DEPTH + b"]" * MAX_DEPTH + b"}") == "wire.too_deep"
    for n in (1000, 10_000, 200_000):
        assert code_of(b'{"a":' + b"[" * n + b"]" * n + b"}", cap=10**6) == "wire.too_deep"
        assert code_of(b'{"a":' + b"[" * n, cap=10**6) in ("wire.too_deep", "wire.invalid_json")


@pytest.mark.parametrize(
    "char", ["\\u0000", "\\u001f", "\\n", "\\t", "\\u007f", "\x00", "\x01", "\n", "\x7f", "\u2028", "\u2029"]
)
def test_control_characters_and_line_separators_are_refused_in_values_and_keys(char: str) -> None:
    assert code_of(('{"a":"x' + char + '"}').encode()) == "wire.control_character"
    assert code_of(('{"a":["x' + char + '"]}').encode()) == "wire.control_character"
    assert code_of(('{"a' + char + '":1}').encode()) == "wire.control_character"


def test_c1_controls_and_other_unicode_pass_the_codec() -> None:
    assert decode('{"a":"\u0085\u00e9\u4e2d\U0001f600"}'.encode(), cap=100) == {"a": "\u0085\u00e9\u4e2d\U0001f600"}


def test_only_bytes_are_decoded() -> None:
    with pytest.raises(WireError) as caught:
        decode("{}", cap=10)  # type: ignore[arg-type]
    assert caught.value.code == "wire.bad_type"
    assert decode(bytearray(b"{}"), cap=10) == {}


def test_encode_is_canonical() -> None:
    assert encode({"b": 1, "a": ["é", None, {"d": True, "c": "\u2028"}]}) == (
        '{"a":["é",null,{"c":"\u2028","d":true}],"b":1}'.encode()
    )
    with pytest.raises(ValueError, match="JSON compliant"):
        encode({"a": float("nan")})


def test_error_messages_are_bounded() -> None:
    error = WireError("wire.bad_type", "x" * 500)
    assert len(error.message) == 200 and error.code == "wire.bad_type"
    assert str(error).startswith("wire.bad_type: ")


def test_wire_codes_are_unique_and_dotted() -> None:
    assert len(set(WIRE_CODES)) == len(WIRE_CODES)
    assert all(code.startswith("wire.") and code.islower() for code in WIRE_CODES)


@FAST
@given(data=st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_wire_errors(data: bytes) -> None:
    try:
        obj = decode(data, cap=200)
    except WireError as error:
        assert error.code in WIRE_CODES
        return
    assert isinstance(obj, dict)


CLEAN = st.recursive(
    st.none() | st.booleans() | st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER) | st.text(SAFE_CHARS),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(SAFE_CHARS, max_size=8), inner, max_size=4),
    max_leaves=20,
)


@FAST
@given(obj=st.dictionaries(st.text(SAFE_CHARS, max_size=8), CLEAN, max_size=4))
def test_clean_objects_survive_encode_then_decode(obj: dict[str, Any]) -> None:
    data = encode(obj)
    assert decode(data, cap=len(data)) == obj
    assert encode(decode(data, cap=len(data))) == data


@FAST
@given(value=JSON_ISH)
def test_json_ish_values_raise_only_wire_errors(value: object) -> None:
    data = json.dumps(value, allow_nan=True).encode()
    try:
        decode(data, cap=10_000)
    except WireError as error:
        assert error.code in WIRE_CODES
