"""The wire tests' property kit: strategies built from declared fields and mutations every message must
refuse. Touches nothing. (The SQL side of the contracts is checked against the deployed database:
tests/integration/db/test_result_shapes.py and test_wire_catalogue.py.)
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import json
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal, get_args

import pytest
from hypothesis import HealthCheck, assume, settings
from hypothesis import strategies as st

from qinglong.wire import (
    ALL_MESSAGES,
    CANCELLATION_RESPONSES,
    LEASE_CONTROL_RESPONSES,
    OFFER_RESPONSES,
    SECRET_DELETE_RESPONSES,
    SECRET_SET_RESPONSES,
    Message,
    Record,
    Variants,
    WireError,
)
from qinglong.wire.codec import decode, encode
from qinglong.wire.common import SHA256_HEX_PATTERN
from qinglong.wire.fields import (
    Base64Bytes,
    Bool,
    Enum,
    Field,
    Int,
    List,
    Map,
    Nested,
    Null,
    Spec,
    Str,
    Token,
    Uuid,
)

# The whole wire suite stays well under 30 s: 200 examples a property, 15 per (family, mutation
# kind) (so 14 kinds give each family ~210 mutated bodies), 100 for the JSON-ish fuzz of a family.
FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
VARIANTS: tuple[Variants[Any], ...] = (
    OFFER_RESPONSES,
    LEASE_CONTROL_RESPONSES,
    CANCELLATION_RESPONSES,
    SECRET_SET_RESPONSES,
    SECRET_DELETE_RESPONSES,
)
Path_ = tuple[str | int, ...]

# ---------------------------------------------------------------- strategies from the declarations

SAFE_CHARS = st.characters(codec="utf-8", exclude_categories=("Cc", "Cs"), exclude_characters="\u2028\u2029")


def _accepts(spec: Spec, value: object) -> bool:
    try:
        spec.check(value, "probe")
    except WireError:
        return False
    return True


def value_strategy(spec: Spec) -> st.SearchStrategy[Any]:
    """Valid Python values of one spec (small: the boundaries have their own tests)."""
    if isinstance(spec, Int):
        return st.integers(spec.lo, spec.hi)
    if isinstance(spec, Uuid):
        return st.uuids().map(str)
    if isinstance(spec, Enum):
        return st.sampled_from(spec.values)
    if isinstance(spec, Null):
        return st.none()
    if isinstance(spec, Bool):
        return st.booleans()
    if isinstance(spec, Token):
        return st.binary(min_size=32, max_size=32).map(lambda b: base64.urlsafe_b64encode(b).decode()[:43])
    if isinstance(spec, Base64Bytes):
        return st.binary(min_size=spec.min_bytes, max_size=min(spec.max_bytes, 96))
    if isinstance(spec, Str):
        if spec.pattern == SHA256_HEX_PATTERN:
            return st.binary(min_size=32, max_size=32).map(bytes.hex)  # cheaper than from_regex
        if spec.pattern is not None:
            return st.from_regex(spec.pattern, fullmatch=True).filter(functools.partial(_accepts, spec))
        return st.text(SAFE_CHARS, min_size=spec.min_len, max_size=min(spec.max_len, 40))
    if isinstance(spec, Nested):
        return records(spec.record)
    if isinstance(spec, List):
        size = min(spec.max_items, 4)
        return st.lists(value_strategy(spec.item), min_size=spec.min_items, max_size=size).map(tuple)
    if isinstance(spec, Map):
        size = min(spec.max_items, 4)
        return st.dictionaries(value_strategy(spec.key), value_strategy(spec.value), max_size=size)
    raise AssertionError(f"no strategy for {spec!r}")


def _build(cls: type[Record], kwargs: dict[str, Any]) -> Record | None:
    try:
        record = cls(**kwargs)
        if isinstance(record, Message):
            record.to_json()
    except WireError:
        return None  # a cross-field rule (REQUIRE_ANY) or the byte cap refused this draw
    return record


_RECORDS: dict[type[Record], st.SearchStrategy[Any]] = {}


def records(cls: type[Record]) -> st.SearchStrategy[Any]:
    """Valid instances of a Record or Message, built from its declared fields only."""
    if cls not in _RECORDS:
        _RECORDS[cls] = _records(cls)
    return _RECORDS[cls]


def _records(cls: type[Record]) -> st.SearchStrategy[Any]:
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for f in cls.FIELDS:
        values = value_strategy(f.spec)
        fields[f.attr] = st.none() | values if f.nullable or f.optional else values
    built = st.fixed_dictionaries(fields).map(functools.partial(_build, cls))
    return built.filter(lambda r: r is not None)


def messages(family: tuple[type[Message], ...]) -> st.SearchStrategy[Message]:
    return st.sampled_from(family).flatmap(records)


# ---------------------------------------------------------------- JSON paths and the mutations


@dataclasses.dataclass(frozen=True)
class Slot:
    """A present field of a record somewhere in a message (field None: the message's schema)."""

    path: Path_
    field: Field | None


def slots(cls: type[Record], obj: Mapping[str, Any], at: Path_ = ()) -> list[Slot]:
    found = [Slot((*at, "schema"), None)] if issubclass(cls, Message) else []
    for f in cls.FIELDS:
        if f.name in obj:
            found.append(Slot((*at, f.name), f))
            found.extend(_inner(f.spec, obj[f.name], (*at, f.name)))
    return found


def _inner(spec: Spec, value: Any, at: Path_) -> list[Slot]:
    if isinstance(spec, Nested) and isinstance(value, dict):
        return slots(spec.record, value, at)
    if isinstance(spec, List) and isinstance(value, list):
        return [s for i, item in enumerate(value) for s in _inner(spec.item, item, (*at, i))]
    return []


def record_paths(cls: type[Record], obj: Mapping[str, Any]) -> list[Path_]:
    nested = [
        s.path
        for s in slots(cls, obj)
        if s.field is not None and isinstance(s.field.spec, Nested) and get(obj, s.path) is not None  # not a null
    ]
    in_lists = [
        (*s.path, i)
        for s in slots(cls, obj)
        if s.field is not None and isinstance(s.field.spec, List) and isinstance(s.field.spec.item, Nested)
        for i in range(len(get(obj, s.path)))
    ]
    return [(), *nested, *in_lists]


def leaves(value: Any, at: Path_ = ()) -> Iterator[tuple[Path_, Any]]:
    """Every (path, value) of a JSON value, containers included."""
    yield at, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from leaves(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from leaves(v, (*at, i))


def get(obj: Any, path: Path_) -> Any:
    for step in path:
        obj = obj[step]
    return obj


def put(obj: Any, path: Path_, value: Any) -> None:
    get(obj, path[:-1])[path[-1]] = value


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, allow_nan=True).encode()


def dumps_duplicating(obj: Any, target: Path_, at: Path_ = ()) -> str:
    """JSON text in which the object at `target` repeats its first key (with the same value)."""
    if isinstance(obj, dict):
        items = [f"{json.dumps(k)}:{dumps_duplicating(v, target, (*at, k))}" for k, v in obj.items()]
        if at == target:
            items.insert(0, items[0])
        return "{" + ",".join(items) + "}"
    if isinstance(obj, list):
        return "[" + ",".join(dumps_duplicating(v, target, (*at, i)) for i, v in enumerate(obj)) + "]"
    return json.dumps(obj, ensure_ascii=False)


SENTINEL = "\ue000sentinel\ue001"
SWAPS: tuple[object, ...] = (0, 7, "x", None, [], {}, True, False, 1.5, [1], {"a": 1})
Mutation = Literal[
    "extra_key",
    "missing_key",
    "type_swap",
    "over_cap",
    "duplicate_key",
    "wrong_schema",
    "upper_uuid",
    "control_character",
    "invalid_utf8",
    "lone_surrogate",
    "int_2_53",
    "int_negative",
    "float_for_int",
    "nan",
]
MUTATIONS: tuple[Mutation, ...] = get_args(Mutation)
EXPECTED: dict[Mutation, set[str]] = {
    "extra_key": {"wire.unknown_field"},
    "missing_key": {"wire.missing_field"},
    "type_swap": {"wire.bad_type", "wire.bad_schema"},
    "over_cap": {"wire.too_large"},
    "duplicate_key": {"wire.duplicate_key"},
    "wrong_schema": {"wire.bad_schema"},
    "upper_uuid": {"wire.bad_uuid"},
    "control_character": {"wire.control_character"},
    "invalid_utf8": {"wire.invalid_utf8"},
    "lone_surrogate": {"wire.invalid_utf8"},
    "int_2_53": {"wire.out_of_range"},
    "int_negative": {"wire.out_of_range"},
    "float_for_int": {"wire.bad_type"},
    "nan": {"wire.invalid_json", "wire.out_of_range"},
}


def _json_type_ok(f: Field | None, value: object) -> bool:
    if f is None:
        return type(value) is str
    if value is None:
        return f.nullable or isinstance(f.spec, Null)
    return type(value) is f.spec.json_type


def applicable(kind: Mutation, cls: type[Message]) -> bool:
    specs = _all_specs(cls)
    if kind == "upper_uuid":
        return any(isinstance(s, Uuid) for s in specs)
    if kind in ("int_2_53", "int_negative", "float_for_int"):
        return any(isinstance(s, Int) for s in specs)
    return True


def _all_specs(cls: type[Record]) -> list[Spec]:
    out: list[Spec] = []
    for f in cls.FIELDS:
        spec = f.spec
        while isinstance(spec, List):
            spec = spec.item
        out.append(spec)
        if isinstance(spec, Nested):
            out.extend(_all_specs(spec.record))
    return out


def mutate(draw: Callable[..., Any], msg: Message, kind: Mutation) -> bytes:
    """One mutation of a valid message's body, as bytes; it must be refused (EXPECTED[kind])."""
    cls = type(msg)
    obj = msg.to_obj()
    present = slots(cls, obj)
    strings = [p for p, v in leaves(obj) if isinstance(v, str)]
    if kind == "extra_key":
        path = draw(st.sampled_from(record_paths(cls, obj)))
        get(obj, path)["unexpectedField"] = draw(st.sampled_from(SWAPS))
    elif kind == "missing_key":
        required = [s.path for s in present if s.field is None or not s.field.optional]
        path = draw(st.sampled_from(required))
        del get(obj, path[:-1])[path[-1]]
    elif kind == "type_swap":
        slot = draw(st.sampled_from(present))
        put(obj, slot.path, draw(st.sampled_from([v for v in SWAPS if not _json_type_ok(slot.field, v)])))
    elif kind == "over_cap":
        path = draw(st.sampled_from(strings))
        put(obj, path, get(obj, path) + "a" * (cls.CAP + 1))
    elif kind == "duplicate_key":
        dicts = [p for p, v in leaves(obj) if isinstance(v, dict) and v]
        return dumps_duplicating(obj, draw(st.sampled_from(dicts))).encode()
    elif kind == "wrong_schema":
        others = sorted({m.SCHEMA for m in ALL_MESSAGES} - {cls.SCHEMA})
        wrong = [cls.SCHEMA.replace("@v1", "@v2"), cls.SCHEMA.upper(), cls.SCHEMA + " ", "", *others]
        obj["schema"] = draw(st.sampled_from(wrong))
    elif kind == "upper_uuid":
        uuids = [s.path for s in present if s.field and isinstance(s.field.spec, Uuid) and get(obj, s.path)]
        assume(uuids)
        path = draw(st.sampled_from(uuids))
        value: str = get(obj, path)
        variants = ["A" + value[1:].upper(), value.replace("-", ""), "{" + value + "}", " " + value]
        put(obj, path, draw(st.sampled_from(variants)))
    elif kind in ("control_character", "invalid_utf8", "lone_surrogate"):
        path = draw(st.sampled_from(strings))
        text: str = get(obj, path)
        at = draw(st.integers(0, len(text)))
        if kind == "control_character":
            bad = draw(st.sampled_from(["\x00", "\x01", "\t", "\n", "\x1f", "\x7f", "\u2028", "\u2029"]))
            put(obj, path, text[:at] + bad + text[at:])
        else:
            put(obj, path, text[:at] + SENTINEL + text[at:])
            raw = [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\x80", b"\xf8\x88\x80\x80\x80"]
            bad_bytes = draw(st.sampled_from(raw if kind == "invalid_utf8" else [b"\\ud800", b"\\udfff"]))
            return dumps(obj).replace(SENTINEL.encode(), bad_bytes, 1)
    elif kind in ("int_2_53", "int_negative", "float_for_int"):
        ints = [s.path for s in present if s.field and isinstance(s.field.spec, Int)]
        if kind == "float_for_int":
            ints = [p for p in ints if get(obj, p) is not None]
        assume(ints)
        path = draw(st.sampled_from(ints))
        new = {"int_2_53": 2**53, "int_negative": -1}.get(kind)
        put(obj, path, float(get(obj, path)) if new is None else new)
    elif kind == "nan":
        slot = draw(st.sampled_from(present))
        put(obj, slot.path, draw(st.sampled_from([math.nan, math.inf, -math.inf])))
    return dumps(obj)


def parsers(cls: type[Message]) -> list[Callable[[bytes], Message]]:
    """The class's own parser and, for a status variant, its family's dispatcher."""
    found: list[Callable[[bytes], Message]] = [cls.parse]
    found.extend(v.parse for v in VARIANTS if cls in v.by_status.values())
    return found


def assert_refused(cls: type[Message], data: bytes, codes: set[str]) -> None:
    for parse in parsers(cls):
        with pytest.raises(WireError) as caught:
            parse(data)
        assert caught.value.code in codes, (caught.value.code, caught.value.message)


def assert_round_trip(msg: Message) -> None:
    cls = type(msg)
    data = msg.to_json()
    assert len(data) <= cls.CAP
    for parse in parsers(cls):
        assert parse(data) == msg
    assert cls.from_obj(msg.to_obj()) == msg
    assert cls.parse(data).to_json() == data
    assert encode(json.loads(data)) == data  # canonical: re-encoding changes nothing
    sql = {k: v for k, v in msg.to_obj().items() if k != "schema"}
    added = {f.name: sql.pop(f.name) for f in cls.FIELDS if f.from_shell}
    assert cls.from_result(sql, **added) == msg
    assert cls.result_json(sql, **added) == data


def assert_only_wire_errors(cls: type[Message], data: bytes) -> None:
    """Parsing arbitrary bytes raises WireError or yields a message that is exactly its input."""
    for parse in parsers(cls):
        try:
            msg = parse(data)
        except WireError:
            continue
        assert msg.to_obj() == decode(data, cap=cls.CAP)
        assert cls.parse(msg.to_json()) == msg


JSON_ISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=16,
)


def shaped(cls: type[Message]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects with the message's schema and keys, each value either valid-looking or arbitrary."""
    optional = {f.name: JSON_ISH | value_strategy(f.spec).map(_dump_one(f)) for f in cls.FIELDS}
    return st.fixed_dictionaries({"schema": st.just(cls.SCHEMA) | JSON_ISH}, optional=optional)


def _dump_one(f: Field) -> Callable[[Any], Any]:
    return f.spec.dump


def mutation_kinds(family: tuple[type[Message], ...]) -> list[Mutation]:
    """The mutations that apply to at least one message of a family (no uuid, no uuid mutation)."""
    return [k for k in MUTATIONS if any(applicable(k, cls) for cls in family)]


def check_mutation(data: st.DataObject, family: tuple[type[Message], ...], kind: Mutation) -> None:
    """Draw a valid message of the family, mutate it once, and see every parser refuse it."""
    cls = data.draw(st.sampled_from([c for c in family if applicable(kind, c)]))
    msg = data.draw(records(cls))
    assert_refused(cls, mutate(data.draw, msg, kind), EXPECTED[kind])


def check_json_ish(data: st.DataObject, family: tuple[type[Message], ...]) -> None:
    """Arbitrary JSON-ish bodies (free-form, or shaped like a message) parse exactly or raise WireError."""
    cls = data.draw(st.sampled_from(family))
    obj = data.draw(shaped(cls) | JSON_ISH)
    assert_only_wire_errors(cls, dumps(obj))


TOKEN = base64.urlsafe_b64encode(bytes(range(32))).decode()[:43]
UUID = "0f0e0d0c-0b0a-4908-8706-050403020100"
