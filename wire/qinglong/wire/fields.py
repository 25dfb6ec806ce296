"""The declarative field engine every wire message is built from. Touches nothing: pure functions.

A message is a frozen, keyword-only dataclass whose fields are declared once with `wire(spec, …)`:

    class LeaseControlRequest(Message):
        SCHEMA = "qinglong/remote-worker-lease-control@v1"
        CAP = 8 * KIB
        worker_generation: int = wire(Int(1))
        lease_token: str = wire(Token(), secret=True)

The same declaration parses (`Msg.parse(bytes)`, `Msg.from_obj(dict)`), checks instances built in
Python (`__post_init__`, so an invalid message cannot exist), and serialises (`to_obj`, `to_json`)
for the sender and the receiver alike. The value specs (Int, Str, Uuid, …) live in
`qinglong.wire.specs` and are re-exported here; `Nested` (a Record inside a message) lives here.
Wire names are the camelCase of the attribute unless `name=` says otherwise. `nullable` fields are
always present and may be null; `optional` fields may be absent (None in Python) and are never null.
`from_shell` marks what the shell adds to a database result (`Msg.from_result`). `secret` keeps a
value out of `repr`. A `Record` is a nested object; a `Message` is a top-level body carrying
`"schema"`. `Variants` dispatches a response family on `status`, one class per status, so every
status keeps its exact key set.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, ClassVar, Generic, Self, TypeVar, dataclass_transform

from qinglong.wire.codec import (
    BAD_ENUM,
    BAD_SCHEMA,
    BAD_TYPE,
    MISSING_FIELD,
    NOT_OBJECT,
    TOO_LARGE,
    UNKNOWN_FIELD,
    WireError,
    decode,
    encode,
)
from qinglong.wire.specs import (
    BASE64URL_32_PATTERN,
    UUID_PATTERN,
    Base64Bytes,
    Bool,
    Enum,
    Int,
    List,
    Map,
    Null,
    Seconds,
    Spec,
    Str,
    Token,
    Uuid,
)

__all__ = [
    "BASE64URL_32_PATTERN",
    "UUID_PATTERN",
    "Base64Bytes",
    "Bool",
    "Enum",
    "Field",
    "Int",
    "List",
    "Map",
    "Message",
    "Nested",
    "Null",
    "Record",
    "Seconds",
    "Spec",
    "Str",
    "Token",
    "Uuid",
    "Variants",
    "camel",
    "wire",
]

_SHOWN_KEY = re.compile("[A-Za-z0-9_]{1,40}")


def _at(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _describe_key(key: object) -> str:
    return repr(key) if isinstance(key, str) and _SHOWN_KEY.fullmatch(key) else "(name not shown)"


@dataclasses.dataclass(frozen=True)
class Field:
    """One declared field, bound to its attribute and wire name."""

    attr: str
    name: str
    spec: Spec
    nullable: bool
    optional: bool
    from_shell: bool
    secret: bool


@dataclasses.dataclass(frozen=True)
class _Declared:
    spec: Spec
    name: str | None
    nullable: bool
    optional: bool
    from_shell: bool
    secret: bool


def wire(
    spec: Spec,
    *,
    name: str | None = None,
    nullable: bool = False,
    optional: bool = False,
    from_shell: bool = False,
    secret: bool = False,
    default: object = dataclasses.MISSING,
) -> Any:
    """Declare one field of a Record or Message (see the module docstring)."""
    if nullable and optional:
        raise ValueError("a field is nullable (always present) or optional (maybe absent), not both")
    declared = _Declared(spec, name, nullable, optional, from_shell, secret)
    return dataclasses.field(default=default, repr=not secret, metadata={"wire": declared})


def camel(attr: str) -> str:
    head, *rest = attr.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(wire,))
class Record:
    """A JSON object with exactly the declared fields. Subclasses become frozen keyword-only
    dataclasses; construction checks every field, so an instance is always valid."""

    FIELDS: ClassVar[tuple[Field, ...]] = ()
    KNOWN: ClassVar[frozenset[str]] = frozenset()  # the wire names a body may carry: FIELDS' and RESERVED
    # Groups of attributes of which at least one must be non-null (a rule the database also holds).
    REQUIRE_ANY: ClassVar[tuple[tuple[str, ...], ...]] = ()
    RESERVED: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        dataclasses.dataclass(frozen=True, kw_only=True)(cls)
        bound = []
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            declared = f.metadata.get("wire")
            if not isinstance(declared, _Declared):
                raise TypeError(f"{cls.__name__}.{f.name} is not declared with wire()")
            name = declared.name or camel(f.name)
            bound.append(
                Field(
                    f.name,
                    name,
                    declared.spec,
                    declared.nullable,
                    declared.optional,
                    declared.from_shell,
                    declared.secret,
                )
            )
        names = [f.name for f in bound]
        if len(set(names)) != len(names) or cls.RESERVED & set(names):
            raise TypeError(f"{cls.__name__} declares a wire name twice or a reserved one")
        attrs = {f.attr for f in bound}
        if any(not set(group) <= attrs for group in cls.REQUIRE_ANY):
            raise TypeError(f"{cls.__name__}.REQUIRE_ANY names an undeclared attribute")
        if cls.__post_init__ is not Record.__post_init__:  # load_at builds without it
            raise TypeError(f"{cls.__name__}: a rule belongs in a spec or REQUIRE_ANY, not in __post_init__")
        cls.FIELDS = tuple(bound)
        cls.KNOWN = frozenset(names) | cls.RESERVED

    def __post_init__(self) -> None:
        where = type(self).__name__
        for f in self.FIELDS:
            value = getattr(self, f.attr)
            if value is None and (f.nullable or f.optional):
                continue
            object.__setattr__(self, f.attr, f.spec.check(value, _at(where, f.name)))
        self._require_any(self.__dict__, where)

    @classmethod
    def _require_any(cls, values: Mapping[str, object], where: str) -> None:
        for group in cls.REQUIRE_ANY:
            if all(values[attr] is None for attr in group):
                names = ", ".join(f.name for f in cls.FIELDS if f.attr in group)
                raise WireError(MISSING_FIELD, f"{where}: one of {names} must not be null")

    @classmethod
    def field(cls, name: str) -> Field:
        """The declared field with this wire name."""
        for f in cls.FIELDS:
            if f.name == name:
                return f
        raise KeyError(name)

    @classmethod
    def load_at(cls, obj: object, where: str) -> Self:
        """Load a decoded JSON object found at `where` (a field path used in error messages)."""
        if not isinstance(obj, dict):
            raise WireError(BAD_TYPE, f"{where or 'body'}: expected an object")
        for key in obj:
            if key not in cls.KNOWN:
                raise WireError(UNKNOWN_FIELD, f"{where or 'body'}: unknown field {_describe_key(key)}")
        values: dict[str, object] = {}
        for f in cls.FIELDS:
            path = _at(where, f.name)
            if f.name not in obj:
                if not f.optional:
                    raise WireError(MISSING_FIELD, f"{path}: missing")
                values[f.attr] = None
                continue
            value = obj[f.name]
            if value is None and not isinstance(f.spec, Null):
                if not f.nullable:
                    raise WireError(BAD_TYPE, f"{path}: must not be null")
                values[f.attr] = None
                continue
            values[f.attr] = f.spec.load(value, path)
        cls._require_any(values, cls.__name__)
        loaded = object.__new__(cls)  # every field was checked as it loaded: no second check in __post_init__
        loaded.__dict__.update(values)
        return loaded

    @classmethod
    def from_obj(cls, obj: object) -> Self:
        """Parse a decoded JSON object (no byte cap: see Message.parse for bytes)."""
        return cls.load_at(obj, "")

    def to_obj(self) -> dict[str, object]:
        """The JSON object: every field, optional ones only when present."""
        out: dict[str, object] = {}
        for f in self.FIELDS:
            value = getattr(self, f.attr)
            if value is None:
                if not f.optional:
                    out[f.name] = None
            else:
                out[f.name] = f.spec.dump(value)
        return out


@dataclasses.dataclass(frozen=True)
class Nested(Spec):
    """A nested object with exactly the fields of `record`."""

    record: type[Record]
    json_type = dict

    def load(self, value: object, where: str) -> Record:
        return self.record.load_at(value, where)

    def check(self, value: object, where: str) -> Record:
        if type(value) is not self.record:
            raise WireError(BAD_TYPE, f"{where}: expected {self.record.__name__}")
        return value

    def dump(self, value: Any) -> object:
        return value.to_obj()


class Message(Record):
    """A top-level wire body: the declared fields plus `"schema"` equal to SCHEMA, at most CAP bytes."""

    SCHEMA: ClassVar[str] = ""
    CAP: ClassVar[int] = 0
    RESERVED = frozenset({"schema"})

    @classmethod
    def check_schema(cls, obj: dict[str, object]) -> None:
        if "schema" not in obj:
            raise WireError(MISSING_FIELD, "schema: missing")
        schema = obj["schema"]
        if type(schema) is not str or schema != cls.SCHEMA:
            raise WireError(BAD_SCHEMA, f"schema: expected {cls.SCHEMA}")

    @classmethod
    def from_obj(cls, obj: object) -> Self:
        if not isinstance(obj, dict):
            raise WireError(NOT_OBJECT, "top level is not an object")
        cls.check_schema(obj)
        return cls.load_at(obj, "")

    @classmethod
    def parse(cls, data: bytes) -> Self:
        """Decode at most CAP bytes strictly and parse them."""
        return cls.from_obj(decode(data, cap=cls.CAP))

    @classmethod
    def _result_obj(cls, result: Mapping[str, object], added: Mapping[str, object]) -> dict[str, object]:
        """The body a database result makes: its keys plus `"schema"` and exactly the fields the shell adds."""
        shell = {f.name for f in cls.FIELDS if f.from_shell}
        if shell - set(added):
            raise WireError(MISSING_FIELD, f"the shell must add: {', '.join(sorted(shell))}")
        if set(added) - shell:
            raise WireError(UNKNOWN_FIELD, f"the shell adds only: {', '.join(sorted(shell)) or 'nothing'}")
        if not isinstance(result, Mapping):
            raise WireError(NOT_OBJECT, "database result is not an object")
        if "schema" in result or shell & set(result):
            raise WireError(UNKNOWN_FIELD, "database result carries a field the shell adds")
        return {**result, "schema": cls.SCHEMA, **added}

    @classmethod
    def from_result(cls, result: Mapping[str, object], **added: object) -> Self:
        """Check a database result against this contract: the result's keys plus `"schema"` and
        exactly the fields the shell adds (wire names, e.g. sessionKey=…)."""
        return cls.from_obj(cls._result_obj(result, added))

    @classmethod
    def result_json(cls, result: Mapping[str, object], **added: object) -> bytes:
        """`from_result(…).to_json()` without dumping the message again: a body that loads dumps to itself (the
        dump of every spec a message uses undoes its load), so the checked body is encoded as it is."""
        body = cls._result_obj(result, added)
        cls.from_obj(body)
        return cls._capped(encode(body))

    def to_obj(self) -> dict[str, object]:
        return {"schema": self.SCHEMA, **super().to_obj()}

    def to_json(self) -> bytes:
        """The canonical bytes; refuses to produce a body over CAP (the receiver would refuse it)."""
        return self._capped(encode(self.to_obj()))

    @classmethod
    def _capped(cls, data: bytes) -> bytes:
        if len(data) > cls.CAP:
            raise WireError(TOO_LARGE, f"{cls.__name__}: body over {cls.CAP} bytes")
        return data


M = TypeVar("M", bound=Message)


class Variants(Generic[M]):
    """One response family whose variants (one Message class per `status`) share SCHEMA and CAP."""

    def __init__(self, *variants: type[M]) -> None:
        if not variants or len({(v.SCHEMA, v.CAP) for v in variants}) != 1:
            raise TypeError("variants share one schema and one cap")
        self.by_status: dict[str, type[M]] = {}
        for v in variants:
            spec = v.field("status").spec
            if not isinstance(spec, Enum) or len(spec.values) != 1 or spec.values[0] in self.by_status:
                raise TypeError(f"{v.__name__} needs its own single status value")
            self.by_status[spec.values[0]] = v
        self.schema = variants[0].SCHEMA
        self.cap = variants[0].CAP

    def variant(self, obj: object) -> type[M]:
        if not isinstance(obj, Mapping):
            raise WireError(NOT_OBJECT, "top level is not an object")
        if "status" not in obj:
            raise WireError(MISSING_FIELD, "status: missing")
        status = obj["status"]
        if type(status) is not str:
            raise WireError(BAD_TYPE, "status: expected a string")
        if status not in self.by_status:
            raise WireError(BAD_ENUM, f"status: not one of {'|'.join(self.by_status)}")
        return self.by_status[status]

    def from_obj(self, obj: object) -> M:
        if isinstance(obj, dict):
            next(iter(self.by_status.values())).check_schema(obj)
        return self.variant(obj).from_obj(obj)

    def parse(self, data: bytes) -> M:
        return self.from_obj(decode(data, cap=self.cap))

    def from_result(self, result: Mapping[str, object], **added: object) -> M:
        return self.variant(result).from_result(result, **added)

    def result_json(self, result: Mapping[str, object], **added: object) -> bytes:
        return self.variant(result).result_json(result, **added)
