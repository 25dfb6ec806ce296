"""Tests of the field engine (qinglong.wire.fields, .specs). Touches nothing."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qinglong.wire import (
    ALL_MESSAGES,
    Message,
    Record,
    Variants,
    WireError,
)
from qinglong.wire.codec import MAX_SAFE_INTEGER, encode
from qinglong.wire.fields import (
    Base64Bytes,
    Enum,
    Int,
    List,
    Map,
    Nested,
    Null,
    Str,
    Token,
    Uuid,
    camel,
    wire,
)
from tests.unit.wire.kit import (
    FAST,
    JSON_ISH,
    TOKEN,
    UUID,
    records,
    shaped,
)

# ---------------------------------------------------------------- tests of the engine itself


class Inner(Record):
    n: int = wire(Int(1, 9))


class Sample(Message):
    SCHEMA = "qinglong/sample@v1"
    CAP = 1024
    REQUIRE_ANY = (("maybe", "absent"),)

    count: int = wire(Int(0, 10))
    label: str = wire(Str(8, min_len=1, pattern="[a-z]+"))
    maybe: str | None = wire(Uuid(), nullable=True)
    absent: int | None = wire(Int(), optional=True, default=None)
    kind: Literal["a", "b"] = wire(Enum(("a", "b")))
    inner: Inner = wire(Nested(Inner))
    items: tuple[Inner, ...] = wire(List(Nested(Inner), max_items=2))
    env: Mapping[str, str] = wire(Map(Str(4, min_len=1), Str(4), max_items=2))
    blob: bytes = wire(Base64Bytes(6), name="blobBase64", secret=True)
    token: str = wire(Token(), secret=True, from_shell=True)
    nothing: None = wire(Null(), default=None)


def sample(**changes: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "schema": "qinglong/sample@v1",
        "count": 3,
        "label": "abc",
        "maybe": UUID,
        "kind": "a",
        "inner": {"n": 1},
        "items": [{"n": 2}],
        "env": {"K": "v"},
        "blobBase64": "AAEC",
        "token": TOKEN,
        "nothing": None,
    }
    obj.update(changes)
    return {k: v for k, v in obj.items() if v is not ...}


def code_of(call: Callable[[], object]) -> str:
    with pytest.raises(WireError) as caught:
        call()
    return caught.value.code


def test_a_sample_parses_into_python_values_and_back() -> None:
    msg = Sample.from_obj(sample())
    assert msg.blob == b"\x00\x01\x02" and msg.absent is None and msg.items == (Inner(n=2),)
    assert msg.to_obj() == sample()
    assert Sample.parse(msg.to_json()) == msg
    assert "token" not in repr(msg) and "blob" not in repr(msg) and TOKEN not in repr(msg)


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"count": True}, "wire.bad_type"),
        ({"count": 1.0}, "wire.bad_type"),
        ({"count": "1"}, "wire.bad_type"),
        ({"count": 11}, "wire.out_of_range"),
        ({"count": -1}, "wire.out_of_range"),
        ({"count": None}, "wire.bad_type"),
        ({"count": ...}, "wire.missing_field"),
        ({"label": ""}, "wire.too_short"),
        ({"label": "abcdefghi"}, "wire.too_long"),
        ({"label": "ABC"}, "wire.bad_pattern"),
        ({"label": "ab\n"}, "wire.control_character"),
        ({"label": "a\ud800"}, "wire.invalid_utf8"),
        ({"maybe": UUID.upper()}, "wire.bad_uuid"),
        ({"maybe": ...}, "wire.missing_field"),
        ({"absent": None}, "wire.bad_type"),
        ({"kind": "c"}, "wire.bad_enum"),
        ({"inner": {"n": 1, "m": 2}}, "wire.unknown_field"),
        ({"inner": {}}, "wire.missing_field"),
        ({"inner": []}, "wire.bad_type"),
        ({"items": [{"n": 1}] * 3}, "wire.too_long"),
        ({"items": {"n": 1}}, "wire.bad_type"),
        ({"env": {"K": "v", "L": "v", "M": "v"}}, "wire.too_long"),
        ({"env": {"": "v"}}, "wire.too_short"),
        ({"env": {"K": 1}}, "wire.bad_type"),
        ({"blobBase64": "AAF="}, "wire.bad_base64"),  # non-canonical padding bits
        ({"blobBase64": "AAEC\n"}, "wire.bad_base64"),
        ({"blobBase64": "AAECAwQFBg=="}, "wire.too_long"),
        ({"blobBase64": "AAEC", "blob": "x"}, "wire.unknown_field"),
        ({"token": TOKEN[:-1] + "B"}, "wire.bad_base64"),  # last character carries non-zero padding bits
        ({"token": TOKEN + "A"}, "wire.bad_base64"),
        ({"nothing": 0}, "wire.bad_type"),
        ({"nothing": ...}, "wire.missing_field"),
        ({"maybe": None}, "wire.missing_field"),  # REQUIRE_ANY: maybe or absent
        ({"schema": "qinglong/sample@v2"}, "wire.bad_schema"),
        ({"schema": ...}, "wire.missing_field"),
    ],
)
def test_each_rule_has_its_stable_code(changes: dict[str, Any], code: str) -> None:
    assert code_of(lambda: Sample.from_obj(sample(**changes))) == code


def test_optional_fields_are_absent_or_valued_and_nullable_ones_always_present() -> None:
    msg = Sample.from_obj(sample(absent=5, maybe=None))
    assert msg.absent == 5 and msg.to_obj()["maybe"] is None
    assert "absent" not in Sample.from_obj(sample()).to_obj()


def test_construction_checks_every_field_so_an_invalid_message_cannot_exist() -> None:
    base = Sample.from_obj(sample())
    fields = {f.attr: getattr(base, f.attr) for f in Sample.FIELDS}
    assert code_of(lambda: Sample(**{**fields, "count": 99})) == "wire.out_of_range"
    assert code_of(lambda: Sample(**{**fields, "items": {Inner(n=1)}})) == "wire.bad_type"
    assert code_of(lambda: Sample(**{**fields, "items": ({"n": 1},)})) == "wire.bad_type"
    assert Sample(**{**fields, "items": [Inner(n=1)]}).items == (Inner(n=1),)  # normalised to a tuple
    assert code_of(lambda: Sample(**{**fields, "maybe": None, "absent": None})) == "wire.missing_field"
    assert code_of(lambda: Inner(n=0)) == "wire.out_of_range"
    frozen = Sample(**{**fields, "env": {"A": "b"}})
    assert frozen.env == {"A": "b"}
    with pytest.raises(TypeError):
        frozen.env["A"] = "c"  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        frozen.count = 1  # type: ignore[misc]


def test_the_sender_cannot_produce_a_body_over_the_cap() -> None:
    class Tiny(Message):
        SCHEMA = "qinglong/tiny@v1"
        CAP = 40
        text: str = wire(Str(100))

    assert Tiny(text="a").to_json() == b'{"schema":"qinglong/tiny@v1","text":"a"}'
    assert code_of(lambda: Tiny(text="a" * 30).to_json()) == "wire.too_large"
    assert code_of(lambda: Tiny.parse(b" " * 41)) == "wire.too_large"


def test_from_result_adds_schema_and_exactly_the_shell_fields() -> None:
    result = {k: v for k, v in sample().items() if k not in ("schema", "token")}
    assert Sample.from_result(result, token=TOKEN) == Sample.from_obj(sample())
    assert code_of(lambda: Sample.from_result(result)) == "wire.missing_field"
    assert code_of(lambda: Sample.from_result(result, token=TOKEN, other=1)) == "wire.unknown_field"
    assert code_of(lambda: Sample.from_result({**result, "token": TOKEN}, token=TOKEN)) == "wire.unknown_field"
    assert code_of(lambda: Sample.from_result({**result, "schema": "x"}, token=TOKEN)) == "wire.unknown_field"
    assert code_of(lambda: Sample.from_result([], token=TOKEN)) == "wire.not_object"  # type: ignore[arg-type]


def test_declarations_are_checked_when_the_class_is_made() -> None:
    with pytest.raises(TypeError):

        class Twice(Record):
            a_b: int = wire(Int())
            other: int = wire(Int(), name="aB")

    with pytest.raises(TypeError):

        class Reserved(Message):
            schema: str = wire(Str(10))

    with pytest.raises(TypeError):

        class Undeclared(Record):
            plain: int = 1

    with pytest.raises(ValueError, match="not both"):
        wire(Int(), nullable=True, optional=True)
    with pytest.raises(ValueError, match="2\\^53"):
        Int(0, 2**53)
    assert camel("cancel_requested_at_ms") == "cancelRequestedAtMs" and camel("sha256") == "sha256"


def test_variants_dispatch_on_status_and_refuse_what_no_variant_claims() -> None:
    class One(Message):
        SCHEMA = "qinglong/v@v1"
        CAP = 100
        status: Literal["one"] = wire(Enum(("one",)), default="one")

    class Two(Message):
        SCHEMA = "qinglong/v@v1"
        CAP = 100
        status: Literal["two"] = wire(Enum(("two",)), default="two")
        n: int = wire(Int())

    family: Variants[One | Two] = Variants(One, Two)
    assert family.parse(b'{"schema":"qinglong/v@v1","status":"two","n":1}') == Two(n=1)
    assert family.from_result({"status": "one"}) == One()
    assert code_of(lambda: family.parse(b'{"schema":"qinglong/v@v1","status":"three"}')) == "wire.bad_enum"
    assert code_of(lambda: family.parse(b'{"schema":"qinglong/v@v1","status":1}')) == "wire.bad_type"
    assert code_of(lambda: family.parse(b'{"schema":"qinglong/v@v1"}')) == "wire.missing_field"
    assert code_of(lambda: family.parse(b'{"schema":"qinglong/w@v1","status":"one"}')) == "wire.bad_schema"
    assert code_of(lambda: family.parse(b"[]")) == "wire.not_object"
    with pytest.raises(TypeError):
        Variants(One, One)


NOT_JSON: tuple[object, ...] = (set(), b"x", (1,), object(), 1j, {1: 2}, {"schema": {"a"}}, float("nan"))


@FAST
@given(obj=st.one_of(JSON_ISH, st.sampled_from(NOT_JSON), shaped(Sample)))
def test_from_obj_raises_only_wire_errors_on_any_python_value(obj: object) -> None:
    classes: tuple[type[Message], ...] = (Sample, *ALL_MESSAGES)
    for cls in classes:
        try:
            msg = cls.from_obj(obj)
        except WireError:
            continue
        assert msg.to_obj() == obj


@FAST
@given(msg=records(Sample))
def test_sample_round_trips(msg: Sample) -> None:
    assert Sample.parse(msg.to_json()) == msg
    assert encode(msg.to_obj()) == msg.to_json()


def test_safe_integer_bounds_are_the_codec_s() -> None:
    assert Int().hi == MAX_SAFE_INTEGER == 2**53 - 1
