"""Value specs: how one JSON value maps to one Python value. Touches nothing: pure functions.

Each spec loads a decoded JSON value (`load`), checks a Python value (`check`; both return the
checked, normalised value) and dumps it back (`dump`). Messages combine them with
`qinglong.wire.fields.wire`; `Nested`, the spec of a nested Record, lives there with Record. Error
messages name the field path and the rule, never the value.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import math
import re
import types
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

from qinglong.wire.codec import (
    BAD_BASE64,
    BAD_ENUM,
    BAD_PATTERN,
    BAD_TYPE,
    BAD_UUID,
    MAX_SAFE_INTEGER,
    OUT_OF_RANGE,
    TOO_LONG,
    TOO_SHORT,
    WireError,
    check_text,
)

UUID_PATTERN = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
# 32 random bytes, base64url without padding: 42 free characters and a last one whose two low bits are 0.
BASE64URL_32_PATTERN = "[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]"
# A user's bearer token as the shell accepts it (RFC 6750 token68, 16..512 characters + padding).
BEARER_TOKEN_PATTERN = "[A-Za-z0-9._~+/-]{16,512}=*"  # noqa: S105  (a syntax, not a secret)
UUID_TEXT = re.compile(UUID_PATTERN)  # a canonical UUID (fullmatch)
_BASE64URL_32 = re.compile(BASE64URL_32_PATTERN)
_BASE64 = re.compile("(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")


class Spec(ABC):
    """How one JSON value maps to a Python value. `load` takes a decoded JSON value, `check` a
    Python value (both return the checked, normalised Python value), `dump` gives the JSON value."""

    json_type: ClassVar[type]

    @abstractmethod
    def check(self, value: object, where: str) -> object: ...

    def load(self, value: object, where: str) -> object:
        return self.check(value, where)

    def dump(self, value: Any) -> object:
        return value


def _expect_str(value: object, where: str) -> str:
    if type(value) is not str:
        raise WireError(BAD_TYPE, f"{where}: expected a string")
    return value


@dataclasses.dataclass(frozen=True)
class Int(Spec):
    """An integer in lo..hi (never a bool, never a float such as 1.0)."""

    lo: int = 0
    hi: int = MAX_SAFE_INTEGER
    json_type = int

    def __post_init__(self) -> None:
        if not -MAX_SAFE_INTEGER <= self.lo <= self.hi <= MAX_SAFE_INTEGER:
            raise ValueError("Int bounds must lie within ±(2^53-1)")

    def check(self, value: object, where: str) -> int:
        if type(value) is not int:
            raise WireError(BAD_TYPE, f"{where}: expected an integer")
        if not self.lo <= value <= self.hi:
            raise WireError(OUT_OF_RANGE, f"{where}: outside {self.lo}..{self.hi}")
        return value


@dataclasses.dataclass(frozen=True)
class Seconds(Spec):
    """A duration in seconds, lo..hi: an integer or a finite float (never a bool), loaded as a float.
    Configuration files use it; no wire message carries a float."""

    lo: float = 0.0
    hi: float = 86400.0
    json_type = float

    def check(self, value: object, where: str) -> float:
        if type(value) not in (int, float) or not math.isfinite(value):  # type: ignore[arg-type]
            raise WireError(BAD_TYPE, f"{where}: expected a number of seconds")
        seconds = float(value)  # type: ignore[arg-type]
        if not self.lo <= seconds <= self.hi:
            raise WireError(OUT_OF_RANGE, f"{where}: outside {self.lo:g}..{self.hi:g} seconds")
        return seconds


@dataclasses.dataclass(frozen=True)
class Str(Spec):
    """A string of min_len..max_len characters, optionally matching `pattern` in full."""

    max_len: int
    min_len: int = 0
    pattern: str | None = None
    _regex: re.Pattern[str] | None = dataclasses.field(init=False, repr=False, compare=False, default=None)
    json_type = str

    def __post_init__(self) -> None:
        if self.pattern is not None:
            object.__setattr__(self, "_regex", re.compile(self.pattern))

    def check(self, value: object, where: str) -> str:
        text = _expect_str(value, where)
        check_text(text, where)
        if len(text) > self.max_len:
            raise WireError(TOO_LONG, f"{where}: longer than {self.max_len} characters")
        if len(text) < self.min_len:
            raise WireError(TOO_SHORT, f"{where}: shorter than {self.min_len} characters")
        if self._regex is not None and not self._regex.fullmatch(text):
            raise WireError(BAD_PATTERN, f"{where}: does not match {self.pattern}")
        return text


@dataclasses.dataclass(frozen=True)
class Uuid(Spec):
    """A UUID in canonical lower-case 8-4-4-4-12 form only."""

    json_type = str

    def check(self, value: object, where: str) -> str:
        text = _expect_str(value, where)
        if not UUID_TEXT.fullmatch(text):
            raise WireError(BAD_UUID, f"{where}: not a lower-case 8-4-4-4-12 UUID")
        return text


@dataclasses.dataclass(frozen=True)
class Enum(Spec):
    """One of a fixed set of strings."""

    values: tuple[str, ...]
    json_type = str

    def check(self, value: object, where: str) -> str:
        text = _expect_str(value, where)
        if text not in self.values:
            raise WireError(BAD_ENUM, f"{where}: not one of {'|'.join(self.values)}")
        return text


@dataclasses.dataclass(frozen=True)
class Bool(Spec):
    """true or false (never 0, 1 or a string)."""

    json_type = bool

    def check(self, value: object, where: str) -> bool:
        if type(value) is not bool:
            raise WireError(BAD_TYPE, f"{where}: expected a boolean")
        return value


@dataclasses.dataclass(frozen=True)
class Null(Spec):
    """Always null: a key a status variant carries with no value (its exact SQL shape)."""

    json_type = type(None)

    def check(self, value: object, where: str) -> None:
        if value is not None:
            raise WireError(BAD_TYPE, f"{where}: must be null")


@dataclasses.dataclass(frozen=True)
class Token(Spec):
    """A 32-byte secret in canonical base64url without padding (43 characters)."""

    json_type = str

    def check(self, value: object, where: str) -> str:
        text = _expect_str(value, where)
        if not _BASE64URL_32.fullmatch(text):
            raise WireError(BAD_BASE64, f"{where}: not 32 bytes of canonical base64url")
        return text


@dataclasses.dataclass(frozen=True)
class Base64Bytes(Spec):
    """Bytes carried as canonical, padded standard base64; Python sees the decoded bytes."""

    max_bytes: int
    min_bytes: int = 0
    json_type = str

    def load(self, value: object, where: str) -> bytes:
        text = _expect_str(value, where)
        if len(text) > 4 * ((self.max_bytes + 2) // 3):
            raise WireError(TOO_LONG, f"{where}: more than {self.max_bytes} bytes")
        if not _BASE64.fullmatch(text):
            raise WireError(BAD_BASE64, f"{where}: not padded standard base64")
        try:
            data = base64.b64decode(text, validate=True)
        except binascii.Error:
            raise WireError(BAD_BASE64, f"{where}: not padded standard base64") from None
        if base64.b64encode(data).decode("ascii") != text:
            raise WireError(BAD_BASE64, f"{where}: not canonical base64")
        return self.check(data, where)

    def check(self, value: object, where: str) -> bytes:
        if type(value) is not bytes:
            raise WireError(BAD_TYPE, f"{where}: expected bytes")
        if len(value) > self.max_bytes:
            raise WireError(TOO_LONG, f"{where}: more than {self.max_bytes} bytes")
        if len(value) < self.min_bytes:
            raise WireError(TOO_SHORT, f"{where}: fewer than {self.min_bytes} bytes")
        return value

    def dump(self, value: Any) -> object:
        return base64.b64encode(value).decode("ascii")


@dataclasses.dataclass(frozen=True)
class List(Spec):
    """An array of min_items..max_items items; Python sees a tuple."""

    item: Spec
    max_items: int
    min_items: int = 0
    json_type = list

    def _items(self, value: object, where: str, *, loading: bool) -> tuple[object, ...]:
        if not isinstance(value, list) and (loading or not isinstance(value, tuple)):
            raise WireError(BAD_TYPE, f"{where}: expected an array")
        if len(value) > self.max_items:
            raise WireError(TOO_LONG, f"{where}: more than {self.max_items} items")
        if len(value) < self.min_items:
            raise WireError(TOO_SHORT, f"{where}: fewer than {self.min_items} items")
        step = self.item.load if loading else self.item.check
        return tuple(step(item, f"{where}[{i}]") for i, item in enumerate(value))

    def load(self, value: object, where: str) -> tuple[object, ...]:
        return self._items(value, where, loading=True)

    def check(self, value: object, where: str) -> tuple[object, ...]:
        return self._items(value, where, loading=False)

    def dump(self, value: Any) -> object:
        return [self.item.dump(item) for item in value]


@dataclasses.dataclass(frozen=True)
class Map(Spec):
    """An object used as a map of at most max_items entries; Python sees a read-only mapping.
    Keys and values are never echoed in errors (an environment may hold secrets)."""

    key: Str
    value: Spec
    max_items: int
    json_type = dict

    def _entries(self, value: object, where: str, *, loading: bool) -> Mapping[str, object]:
        if not isinstance(value, dict) and (loading or not isinstance(value, Mapping)):
            raise WireError(BAD_TYPE, f"{where}: expected an object")
        if len(value) > self.max_items:
            raise WireError(TOO_LONG, f"{where}: more than {self.max_items} entries")
        step = self.value.load if loading else self.value.check
        out = {self.key.check(k, f"{where} key"): step(v, f"{where} value") for k, v in value.items()}
        return types.MappingProxyType(out)

    def load(self, value: object, where: str) -> Mapping[str, object]:
        return self._entries(value, where, loading=True)

    def check(self, value: object, where: str) -> Mapping[str, object]:
        return self._entries(value, where, loading=False)

    def dump(self, value: Any) -> object:
        return {k: self.value.dump(v) for k, v in value.items()}
