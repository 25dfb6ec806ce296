"""Render a Run's timeline (qinglong/run-timeline@v1) and a page of the run history (qinglong/run-list@v1) as
plain-text tables. Touches nothing."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from typing import Any


def _at(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%H:%M:%S.%f")[:-3]


def render(timeline: Mapping[str, Any], title: str = "") -> str:
    run = timeline["run"]
    head = f"{title} run {run['runId']}: {run['status']} (version {run['version']}, {run['eventSequence']} events)"
    rows = [("#", "at (UTC)", "event", "actor", "detail")]
    for e in timeline["events"]:
        payload = json.loads(e["payload"])
        detail = ", ".join(f"{k}={v}" for k, v in sorted(payload.items()) if k not in ("workerId", "offerId"))
        rows.append((str(e["sequence"]), _at(e["occurredAtMs"]), e["type"], e["actorKind"], detail[:60]))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [head.strip()]
    for r in rows:
        lines.append("  " + "  ".join(c.ljust(widths[i]) for i, c in enumerate(r[:4])) + "  " + r[4])
    return "\n".join(lines)


def _when(ms: int | None) -> str:
    return "-" if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def render_runs(page: Mapping[str, Any]) -> str:
    """One row per Run (times in UTC), then the cursor of the next page, or that this was the last."""
    rows = [("run", "status", "task", "attempts", "created (UTC)", "started (UTC)", "ended (UTC)", "exit", "cancel")]
    for r in page["runs"]:
        exit_code, cancel = r["exitCode"], r["cancelReason"]
        rows.append(
            (
                r["runId"], r["status"], r["taskName"], str(r["attemptCount"]), _when(r["createdAtMs"]),
                _when(r["startedAtMs"]), _when(r["endedAtMs"]), "-" if exit_code is None else str(exit_code),
                cancel or "-",
            )
        )  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip() for row in rows]
    cursor = page["nextCursor"]
    lines.append(f"next page: --cursor {cursor}" if cursor else f"{len(page['runs'])} Runs, the last page")
    return "\n".join(lines)
