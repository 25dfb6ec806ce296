"""The one JSON log line of the shell, the Worker and the CLI's server commands. Touches nothing but the
logger a caller hands to `emit` and the root logger that `configure` sets up.

A line is one JSON object: time (UTC, ms), level, component (`shell`, `worker`, … from the logger
`qinglong.<component>`), event, the ids and a reason code. Callers pass ids and codes only, never a
lease token, session key, bearer token or signature. A repeating event (same `key`: a transport
failure, a refusal) is written the first time and then at most once per `every_s`, with how many
were held back in between. Standard library only.

A record's message is the event's fields (`Line`), turned into JSON text only when something asks for
the text; JsonLines encodes them once, with its head, instead of parsing the text back (the shell writes
one line per request: a profile measured the double encoding at about a tenth of its CPU per renewal).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from time import monotonic
from typing import Any, Final

_HELD: dict[str, tuple[float, int]] = {}  # key → (when last written, how many held back since)
_MAX_KEYS: Final = 256
_JSON: Final = json.JSONEncoder(default=str)  # made once (json.dumps with an option makes one per call)


def configure() -> None:
    """Send INFO and above to stderr as JSON lines (a server command's first step). A line holds none of the
    record's caller, thread or process, so the logging module is told not to look them up (its documented
    optimisation: the shell writes a line per request)."""
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines())
    logging.basicConfig(level=logging.INFO, handlers=[handler])


class Line(dict[str, Any]):
    """An event's fields as a log record's message; its text is the JSON object, keys sorted."""

    __slots__ = ()

    def __str__(self) -> str:
        return json.dumps(self, sort_keys=True, default=str)


def emit(
    log: logging.Logger, level: int, event: str, *, key: str | None = None, every_s: float = 60.0, **fields: Any
) -> None:
    """Log `event` with `fields` (JSON values: ids, codes, numbers) on `log`."""
    if key is not None:
        now = monotonic()
        last, held = _HELD.get(key, (None, 0))
        if last is not None and now - last < every_s:
            _HELD[key] = (last, held + 1)
            return
        if len(_HELD) >= _MAX_KEYS and key not in _HELD:
            _HELD.clear()  # bounded: forgetting only makes the next line come sooner
        _HELD[key] = (now, 0)
        if held:
            fields["repeated"] = held
    log.log(level, Line(event=event, **fields))


def settled(key: str) -> None:
    """The condition behind `key` is over: its next occurrence is written at once."""
    _HELD.pop(key, None)


class JsonLines(logging.Formatter):
    """`{"time", "level", …the event's fields}` on one line; a message that is not a JSON object
    becomes `{"message": …}`. Exceptions are reduced to their class name (no traceback, no values)."""

    def format(self, record: logging.LogRecord) -> str:
        fields: Any
        if isinstance(record.msg, Line) and not record.args:
            fields = dict(sorted(record.msg.items()))
        else:
            message = record.getMessage()
            try:
                fields = json.loads(message)
            except ValueError:
                fields = None
            if not isinstance(fields, dict):
                fields = {"message": message}
        if record.exc_info and record.exc_info[0] is not None:
            fields["exception"] = record.exc_info[0].__name__
        stamp = dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds")
        head = {
            "time": stamp.replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "component": record.name.removeprefix("qinglong.").split(".")[0],
        }
        return _JSON.encode({**head, **fields})
