"""Render a Run's timeline (qinglong/run-timeline@v1) and a page of the run history (qinglong/run-list@v1) as
tables (qinglong.cli.printing.table), and say why an Attempt ended without its task's exit code (`why`: its
errorCode, and the message its Worker gave or the catalogue's, qinglong.wire.reasons; a start failure says that
nothing ran). Touches nothing."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

from qinglong.cli.printing import plural, table
from qinglong.wire.reasons import START_FAILURES, message_of

ATTEMPT_ENDS = ("attempt.failed", "attempt.cancelled", "attempt.timed_out")  # the end events that carry a code


def _at(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%H:%M:%S.%f")[:-3]


def render(timeline: Mapping[str, Any], title: str = "") -> str:
    run = timeline["run"]
    events = plural(run["eventSequence"], "event")
    head = f"{title} run {run['runId']}: {run['status']} (version {run['version']}, {events})"
    rows = []
    for e in timeline["events"]:
        payload = json.loads(e["payload"])
        detail = ", ".join(f"{k}={v}" for k, v in sorted(payload.items()) if k not in ("workerId", "offerId"))
        rows.append((e["sequence"], _at(e["occurredAtMs"]), e["type"], e["actorKind"], detail[:60]))
    lines = [head.strip(), table(("#", "at (UTC)", "event", "actor", "detail"), rows, indent="  ")]
    return "\n".join(lines + [f"  why: {line}" for line in reasons(timeline)])


def why(attempt_no: object, status: str, code: str, message: str | None) -> str:
    """One line: how the Attempt ended and why, saying so when nothing ran."""
    text = message or message_of(code) or "no message"
    ended = status.replace("_", " ")
    if code in START_FAILURES:
        return f"attempt {attempt_no} {ended} before its task started (nothing ran): {code}: {text}"
    return f"attempt {attempt_no} {ended}: {code}: {text}"


def reasons(timeline: Mapping[str, Any], attempt_id: str | None = None) -> list[str]:
    """`why` for each Attempt (or only `attempt_id`) whose end carries an errorCode, in order."""
    found = []
    for e in timeline["events"]:
        if e["type"] not in ATTEMPT_ENDS or (attempt_id is not None and e["attemptId"] != attempt_id):
            continue
        payload = json.loads(e["payload"])
        if isinstance(payload.get("errorCode"), str):
            message = payload.get("errorMessage")
            found.append(why(payload.get("attemptNo"), e["type"].split(".", 1)[1], payload["errorCode"],
                             message if isinstance(message, str) else None))  # fmt: skip
    return found


def _when(ms: int | None) -> str:
    return "-" if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def render_runs(page: Mapping[str, Any]) -> str:
    """One row per Run (times in UTC), then the cursor of the next page, or that this was the last."""
    rows = [
        (r["runId"], r["status"], r["taskName"], r["attemptCount"], _when(r["createdAtMs"]), _when(r["startedAtMs"]),
         _when(r["endedAtMs"]), r["exitCode"], r["cancelReason"])
        for r in page["runs"]
    ]  # fmt: skip
    heads = ("run", "status", "task", "attempts", "created (UTC)", "started (UTC)", "ended (UTC)", "exit", "cancel")
    cursor = page["nextCursor"]
    last = f"next page: --cursor {cursor}" if cursor else f"{plural(len(page['runs']), 'Run')}, the last page"
    return table(heads, rows) + "\n" + last
