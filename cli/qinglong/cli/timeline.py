"""Render a Run's timeline (qinglong/run-timeline@v1) and a page of the run history (qinglong/run-list@v1) as
tables (qinglong.cli.printing.table). Touches nothing."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

from qinglong.cli.printing import plural, table


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
    return head.strip() + "\n" + table(("#", "at (UTC)", "event", "actor", "detail"), rows, indent="  ")


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
