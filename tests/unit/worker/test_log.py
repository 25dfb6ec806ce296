"""The Worker's log lines: one JSON object with time and level, a repeating event held back and
counted, exceptions reduced to their class. Touches: a logger handler of its own."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator

import pytest

from qinglong.wire import logline
from qinglong.wire.logline import JsonLines, emit, settled


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLines())
    logger = logging.getLogger("qinglong.worker")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    logline._HELD.clear()
    yield stream
    logger.removeHandler(handler)
    logger.setLevel(old_level)


LOG = logging.getLogger("qinglong.worker")


def parsed(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_an_event_is_one_json_line_with_utc_time_and_level(lines: io.StringIO) -> None:
    emit(LOG, logging.WARNING, "call.refused", route="lease-control", status=409, code="fenced.stale_version")
    [line] = parsed(lines)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", str(line.pop("time")))
    assert line == {"level": "warning", "component": "worker", "event": "call.refused", "route": "lease-control",
                    "status": 409, "code": "fenced.stale_version"}  # fmt: skip


def test_a_repeating_event_is_written_once_then_counted(lines: io.StringIO, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr("qinglong.wire.logline.monotonic", lambda: clock[0])
    for _ in range(5):
        emit(LOG, logging.WARNING, "call.transport_failed", key="transport:pull", route="pull", error="TimeoutError")
    clock[0] += 61
    emit(LOG, logging.WARNING, "call.transport_failed", key="transport:pull", route="pull", error="TimeoutError")
    first, second = parsed(lines)
    assert "repeated" not in first and second["repeated"] == 4
    settled("transport:pull")
    emit(LOG, logging.WARNING, "call.transport_failed", key="transport:pull", route="pull", error="TimeoutError")
    assert len(parsed(lines)) == 3, "a settled condition is written again at once"


def test_a_plain_message_and_an_exception_stay_one_json_line(lines: io.StringIO) -> None:
    logger = logging.getLogger("qinglong.worker")
    try:
        raise ValueError("secret-value")
    except ValueError:
        logger.exception("not json")
    [line] = parsed(lines)
    assert (line["message"], line["exception"], line["level"]) == ("not json", "ValueError", "error")
    assert "secret-value" not in lines.getvalue() and "Traceback" not in lines.getvalue()


def test_an_event_is_encoded_once_and_reads_the_same_as_text(
    lines: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The formatter encodes the event's fields with its head (sorted, as the record's text has them) and
    never parses the text back; any other handler still reads the record's text as the JSON object."""
    kept: list[logging.LogRecord] = []

    class Keeper(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            kept.append(record)

    keeper = Keeper()
    LOG.addHandler(keeper)
    try:
        with monkeypatch.context() as patch:
            patch.setattr("qinglong.wire.logline.json.loads", lambda *a, **k: pytest.fail("parsed the text back"))
            emit(LOG, logging.INFO, "request", route="worker.lease_control", status=200, ms=1.25, id=None)
    finally:
        LOG.removeHandler(keeper)
    line = lines.getvalue().splitlines()[0]
    assert list(json.loads(line))[3:] == ["event", "id", "ms", "route", "status"]
    assert json.loads(kept[0].getMessage()) == {"event": "request", "id": None, "ms": 1.25,
                                                "route": "worker.lease_control", "status": 200}  # fmt: skip
