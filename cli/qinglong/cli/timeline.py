"""Render a Run's timeline (qinglong/run-timeline@v1) as a plain-text table. Touches nothing."""

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
