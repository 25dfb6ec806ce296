"""A flood of TLS handshakes against a shell listener from one source address, and the shell process's
memory read from /proc: what part (f) of `make bench` (bench/flood.py) and
tests/integration/shell/test_flood_memory.py both do. Each of `clients` loops: open a TLS connection from
`source` (a loopback address other than the legitimate clients' 127.0.0.1, so that per-source budgets tell
them apart), close it as soon as the handshake ends, and again at once, until the time is up. With a client
context that has no certificate, the worker listener refuses every handshake (TLS 1.3: after the client's
Finished). Touches loopback sockets and /proc/<pid> (reads status; writes clear_refs to reset VmHWM).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

FLOOD_SOURCE: Final = "127.0.0.2"
SAMPLE_S: Final = 0.1


@dataclass
class Flood:
    """What one flood did, seen from its clients, and the shell's RSS sampled through it (MiB)."""

    completed: int = 0  # handshakes the client finished (the worker listener may still refuse after)
    refused: int = 0  # connections closed or reset before the client's handshake ended
    rss_samples: list[float] = field(default_factory=list)
    peak_mib: float = 0.0  # VmHWM at the end, reset at the start


def status_mib(pid: int, key: str = "VmRSS") -> float:
    """A line of /proc/<pid>/status in MiB (VmRSS, VmHWM); 0 when the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def reset_peak(pid: int) -> None:
    """Reset the process's VmHWM to its current RSS (Linux: `5` into clear_refs; our own child process)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


async def _client(port: int, ctx: ssl.SSLContext, source: str, until: float, flood: Flood) -> None:
    while time.monotonic() < until:
        try:
            _, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", port, ssl=ctx, local_addr=(source, 0)), 15
            )
        except (OSError, TimeoutError):
            flood.refused += 1
            await asyncio.sleep(0)  # no back-off: an attacker retries at once
            continue
        flood.completed += 1
        writer.close()
        with contextlib.suppress(OSError, TimeoutError):
            await asyncio.wait_for(writer.wait_closed(), 2)


async def handshake_flood(
    pid: int, port: int, ctx: ssl.SSLContext, *, clients: int, seconds: float, source: str = FLOOD_SOURCE
) -> Flood:
    """`clients` handshaking loops against 127.0.0.1:`port` from `source` for `seconds`, sampling the RSS of
    process `pid` every SAMPLE_S; its VmHWM is reset at the start and read at the end."""
    flood = Flood()
    reset_peak(pid)
    until = time.monotonic() + seconds
    tasks = [asyncio.ensure_future(_client(port, ctx, source, until, flood)) for _ in range(clients)]
    while time.monotonic() < until:
        flood.rss_samples.append(status_mib(pid))
        await asyncio.sleep(SAMPLE_S)
    await asyncio.gather(*tasks)
    flood.peak_mib = max(status_mib(pid, "VmHWM"), *flood.rss_samples)
    return flood


async def settle(pid: int, target_mib: float, within: float) -> tuple[float, float]:
    """Wait until process `pid`'s RSS is at most `target_mib`, for at most `within` seconds: (seconds
    waited, the last RSS in MiB)."""
    started = time.monotonic()
    while True:
        rss = status_mib(pid)
        waited = time.monotonic() - started
        if rss <= target_mib or waited >= within:
            return waited, rss
        await asyncio.sleep(0.5)
