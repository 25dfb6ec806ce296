"""How the benchmarks report: numbers as text, Markdown tables, one benchmark's result (its section of
RESULTS.md, summaries and figures), the machine it ran on, and bench/results.json. Touches: /proc (read),
the postgres binary (--version) and bench/results.json (read-modify-write)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qinglong.devdb import server_bindir

RESULTS_JSON = Path(__file__).resolve().parent / "results.json"


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by nearest rank; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def fmt(value: float | int | None, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}f}"


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0 or math.isnan(a) or math.isnan(b):
        return "—"
    return f"{a / b:.2f}x"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


@dataclass
class Result:
    """One benchmark's section of RESULTS.md, its one-line summaries, and its numbers."""

    markdown: str
    summary: list[str]
    data: dict[str, Any] = field(default_factory=dict)


def machine() -> dict[str, str]:
    mem_kb = status_meminfo("MemTotal")
    cpu_model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    pg = subprocess.run([str(server_bindir() / "postgres"), "--version"], capture_output=True, text=True, check=False)
    return {
        "nproc": str(os.cpu_count()),
        "cpu": cpu_model or platform.processor() or "unknown",
        "memory": f"{(mem_kb or 0) / 1024 / 1024:.1f} GiB",
        "kernel": f"{platform.system()} {platform.release()}",
        "postgresql": pg.stdout.strip(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
    }


def status_meminfo(key: str) -> int | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return None


def record_json(key: str, counts: dict[str, Any], path: Path = RESULTS_JSON) -> None:
    """Read-modify-write bench/results.json (one JSON object; every other benchmark keeps its key)."""
    data: dict[str, Any] = {}
    with contextlib.suppress(FileNotFoundError, ValueError):
        loaded = json.loads(path.read_text())
        if isinstance(loaded, dict):
            data = loaded
    data[key] = counts
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
