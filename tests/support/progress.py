"""Progress lines for long runs (the benchmarks, the chaos and failover engines), each stamped with the
seconds since this module was first imported. Touches stdout only."""

from __future__ import annotations

import time

_STARTED = time.monotonic()


def say(text: str) -> None:
    """One progress line on stdout, stamped with the seconds since the command started."""
    print(f"[{time.monotonic() - _STARTED:6.1f}s] {text}", flush=True)


def elapsed() -> float:
    return time.monotonic() - _STARTED
