"""Strict JSON decoding and canonical encoding of wire bodies. Touches nothing: pure functions.

`decode` is the only way bytes become a wire object. It refuses, with one exception type
(`WireError`, whose `code` is a stable dotted string), everything the contracts rule out before any
field is looked at: over-cap bytes (counted before decoding), invalid UTF-8 (including lone
surrogates written as JSON escapes), invalid JSON, NaN and the infinities, duplicate keys at any
depth, integers outside ±(2^53-1), nesting deeper than `MAX_DEPTH`, control characters and
U+2028/U+2029 in any string or key, and a top level that is not an object. Field-level rules
(types, bounds, enums, unknown or missing fields) live in `qinglong.wire.fields`.

`encode` is the one canonical serialisation: sorted keys, no spaces, UTF-8, no NaN.
"""

from __future__ import annotations

import json
import math
import re
from typing import Final

MAX_SAFE_INTEGER: Final = 2**53 - 1
MAX_DEPTH: Final = 32
KIB: Final = 1024

TOO_LARGE: Final = "wire.too_large"
INVALID_UTF8: Final = "wire.invalid_utf8"
INVALID_JSON: Final = "wire.invalid_json"
TOO_DEEP: Final = "wire.too_deep"
DUPLICATE_KEY: Final = "wire.duplicate_key"
NOT_OBJECT: Final = "wire.not_object"
UNKNOWN_FIELD: Final = "wire.unknown_field"
MISSING_FIELD: Final = "wire.missing_field"
BAD_TYPE: Final = "wire.bad_type"
OUT_OF_RANGE: Final = "wire.out_of_range"
BAD_UUID: Final = "wire.bad_uuid"
CONTROL_CHARACTER: Final = "wire.control_character"
BAD_SCHEMA: Final = "wire.bad_schema"
BAD_ENUM: Final = "wire.bad_enum"
TOO_LONG: Final = "wire.too_long"
TOO_SHORT: Final = "wire.too_short"
BAD_PATTERN: Final = "wire.bad_pattern"
BAD_BASE64: Final = "wire.bad_base64"
VERSION_MISMATCH: Final = "wire.version_mismatch"

WIRE_CODES: Final[tuple[str, ...]] = (
    TOO_LARGE,
    INVALID_UTF8,
    INVALID_JSON,
    TOO_DEEP,
    DUPLICATE_KEY,
    NOT_OBJECT,
    UNKNOWN_FIELD,
    MISSING_FIELD,
    BAD_TYPE,
    OUT_OF_RANGE,
    BAD_UUID,
    CONTROL_CHARACTER,
    BAD_SCHEMA,
    BAD_ENUM,
    TOO_LONG,
    TOO_SHORT,
    BAD_PATTERN,
    BAD_BASE64,
    VERSION_MISMATCH,
)

_MESSAGE_MAX = 200
# ASCII controls, DEL, the two JavaScript line terminators, and (only reachable through \uXXXX
# escapes or a caller's str) UTF-16 surrogates, which are not Unicode scalar values.
_BAD_CHARACTER = re.compile("[\x00-\x1f\x7f\u2028\u2029\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")


class WireError(Exception):
    """A body or value that breaks a wire contract. `code` is stable (WIRE_CODES); `message` names
    the field path and the rule, never the offending value (it may be a token)."""

    code: str
    message: str

    def __init__(self, code: str, message: str) -> None:
        message = message if len(message) <= _MESSAGE_MAX else message[: _MESSAGE_MAX - 3] + "..."
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def check_text(value: str, where: str) -> None:
    """Refuse control characters, U+2028/U+2029 and lone surrogates in one string."""
    found = _BAD_CHARACTER.search(value)
    if found is None:
        return
    if _SURROGATE.match(found.group()):
        raise WireError(INVALID_UTF8, f"{where}: lone surrogate (not UTF-8)")
    raise WireError(CONTROL_CHARACTER, f"{where}: control or line-separator character")


def _pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise WireError(DUPLICATE_KEY, "an object repeats a key")
    return obj


def _constant(name: str) -> object:
    raise WireError(INVALID_JSON, f"{name} is not JSON")


def _integer(text: str) -> int:
    if len(text.lstrip("-")) > 16:
        raise WireError(OUT_OF_RANGE, "integer outside ±(2^53-1)")
    value = int(text)
    if abs(value) > MAX_SAFE_INTEGER:
        raise WireError(OUT_OF_RANGE, "integer outside ±(2^53-1)")
    return value


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise WireError(OUT_OF_RANGE, "number overflows a double")
    return value


def _walk(root: object) -> None:
    """Check depth and every string (keys too) without recursion."""
    stack: list[tuple[object, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            if depth > MAX_DEPTH:
                raise WireError(TOO_DEEP, f"nesting deeper than {MAX_DEPTH}")
            for key, value in node.items():
                check_text(key, "a key")
                stack.append((value, depth + 1))
        elif isinstance(node, list):
            if depth > MAX_DEPTH:
                raise WireError(TOO_DEEP, f"nesting deeper than {MAX_DEPTH}")
            stack.extend((value, depth + 1) for value in node)
        elif isinstance(node, str):
            check_text(node, "a string")


# Made once: json.loads and json.dumps with options build a decoder or an encoder on every call.
_DECODER: Final = json.JSONDecoder(
    strict=False,  # raw control characters reach _walk, which names them
    object_pairs_hook=_pairs,
    parse_constant=_constant,
    parse_int=_integer,
    parse_float=_float,
)
_ENCODER: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def decode(data: bytes | bytearray, *, cap: int) -> dict[str, object]:
    """Decode one wire body of at most `cap` bytes into a JSON object, or raise WireError."""
    if not isinstance(data, bytes | bytearray):
        raise WireError(BAD_TYPE, "a body is bytes")
    if len(data) > cap:
        raise WireError(TOO_LARGE, f"body over {cap} bytes")
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        raise WireError(INVALID_UTF8, "body is not UTF-8") from None
    try:
        obj: object = _DECODER.decode(text)
    except RecursionError:
        raise WireError(TOO_DEEP, f"nesting deeper than {MAX_DEPTH}") from None
    except ValueError:
        raise WireError(INVALID_JSON, "body is not one JSON value") from None
    if not isinstance(obj, dict):
        raise WireError(NOT_OBJECT, "top level is not an object")
    _walk(obj)
    return obj


def encode(obj: object) -> bytes:
    """The canonical bytes of a JSON value: sorted keys, no whitespace, UTF-8, finite numbers."""
    return _ENCODER.encode(obj).encode()
