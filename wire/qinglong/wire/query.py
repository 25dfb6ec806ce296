"""Query strings parsed by the same field engine as bodies. Touches nothing: pure functions.

A `Query` is a Record whose fields are the query parameters of a GET route (wire names, camelCase),
each optional (absent or a value, never null) and a string, enum, uuid or integer. `Q.parse(raw)` takes
the raw query string (still percent-encoded) and refuses, with the codes bodies use: a string over
`CAP` characters (wire.too_long), anything that is not `name=value` pairs joined by `&` in UTF-8
(wire.bad_type), a repeated parameter (wire.duplicate_key), an unknown one (wire.unknown_field), an
integer that is not plain decimal digits (wire.bad_type), and every rule of the field's spec. The
values are then exactly what a JSON body would carry, so one declaration serves the shell, the
OpenAPI document, the protocol document and the client (`q.to_query()`).
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Any, ClassVar, Self

from qinglong.wire.codec import BAD_TYPE, DUPLICATE_KEY, TOO_LONG, WireError
from qinglong.wire.fields import Enum, Int, Record, Str, Uuid

WHERE = "query"
_DECIMAL = re.compile("-?(?:0|[1-9][0-9]*)")
_SHOWN_NAME = re.compile("[A-Za-z0-9_]{1,40}")


class Query(Record):
    """The query parameters of a route: every field optional, each a Str, Enum, Uuid or Int."""

    CAP: ClassVar[int] = 1024  # characters of the raw query string

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for f in cls.FIELDS:
            if not f.optional or f.nullable or not isinstance(f.spec, Str | Enum | Uuid | Int):
                raise TypeError(f"{cls.__name__}.{f.attr}: a query parameter is optional and a string or integer")

    @classmethod
    def parse(cls, raw: str) -> Self:
        """The parameters of a raw (percent-encoded) query string, checked like a body's fields."""
        if len(raw) > cls.CAP:
            raise WireError(TOO_LONG, f"{WHERE}: longer than {cls.CAP} characters")
        if not raw:
            return cls.load_at({}, WHERE)
        try:
            pairs = urllib.parse.parse_qsl(raw, keep_blank_values=True, strict_parsing=True, errors="strict")
        except ValueError:  # UnicodeDecodeError included
            raise WireError(BAD_TYPE, f"{WHERE}: not name=value pairs joined by & in UTF-8") from None
        specs = {f.name: f.spec for f in cls.FIELDS}
        obj: dict[str, object] = {}
        for name, text in pairs:
            shown = repr(name) if _SHOWN_NAME.fullmatch(name) else "(name not shown)"
            if name in obj:
                raise WireError(DUPLICATE_KEY, f"{WHERE}: parameter {shown} repeated")
            spec = specs.get(name)
            if isinstance(spec, Int):
                if not _DECIMAL.fullmatch(text):
                    raise WireError(BAD_TYPE, f"{WHERE}.{name}: expected a decimal integer")
                obj[name] = int(text)
            else:
                obj[name] = text  # an unknown name is refused by load_at, without its value
        return cls.load_at(obj, WHERE)

    def to_query(self) -> str:
        """The query string of the parameters that are present (empty when none are)."""
        return urllib.parse.urlencode(
            [
                (f.name, str(f.spec.dump(getattr(self, f.attr))))
                for f in self.FIELDS
                if getattr(self, f.attr) is not None
            ]
        )
