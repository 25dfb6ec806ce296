"""What the benchmarks measure with: a warm-up then a measured window, a phase's calls and latencies, and
CPU meters over process groups (this load generator, the shell, PostgreSQL, the rest of the machine) with
WAL fsyncs, and the table cells they fill. Touches: /proc (read) and pg_stat_wal (read)."""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from bench.report import percentile
from tests.support.env import Env

WARMUP_S = 1.0


@dataclass
class Phase:
    """One measured window: completed calls, their latencies (s), errors, CPU split."""

    name: str
    clients: int
    seconds: float
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    cpu: dict[str, float] | None = None
    count: int | None = None  # when set: completed operations counted without their latencies

    @property
    def done(self) -> int:
        return len(self.latencies) if self.count is None else self.count

    @property
    def rate(self) -> float:
        return self.done / self.seconds

    def ms(self, q: float) -> float:
        return percentile(self.latencies, q) * 1000


class Window:
    """Warm-up, then a measured window; calls that end inside it count."""

    def __init__(self, seconds: float) -> None:
        now = time.perf_counter()
        self.start = now + WARMUP_S
        self.end = self.start + seconds

    def record(self, phase: Phase, started: float, ended: float) -> None:
        if self.start <= ended <= self.end:
            phase.latencies.append(ended - started)

    async def meter(self, meter: CpuMeter) -> dict[str, float]:
        """CPU used by the processes of `meter` over exactly the measured window."""
        await asyncio.sleep(max(0.0, self.start - time.perf_counter()))
        meter.start()
        await asyncio.sleep(max(0.0, self.end - time.perf_counter()))
        return meter.stop()


_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_ticks(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[11]) + int(fields[12])  # utime + stime (fields 14 and 15)


def children_of(pid: int) -> list[int]:
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[1] == str(pid):
            found.append(int(entry.name))
    return found


def _machine_busy() -> tuple[int, int, int]:
    """(busy, steal, total) jiffies of all cores since boot (guest time is inside user time)."""
    parts = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]][:8]
    idle, steal = parts[3] + parts[4], parts[7] if len(parts) > 7 else 0
    total = sum(parts)
    return total - idle - steal, steal, total


def status_kb(pid: int | str, key: str) -> int | None:
    """A `kB` line of /proc/<pid>/status (VmRSS, VmHWM, RssAnon…), or None."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


@dataclass
class CpuMeter:
    """CPU used over a window, in cores (1.0 = one core busy), by process groups:
    `self` (this load generator), `shell` (one pid) and `postgres` (the postmaster's children that
    live through the window); `rest` is everything else on the machine (cores), `machine` the busy
    fraction of all cores and `steal` the fraction the hypervisor took."""

    shell_pid: int | None
    postmaster_pid: int | None
    wal_dsn: str | None = None  # with it: WAL fsyncs over the window, from pg_stat_wal
    _start: dict[str, dict[int, int]] = field(default_factory=dict)
    _wal0: tuple[int, float] = (0, 0.0)
    _t0: float = 0.0
    _busy0: tuple[int, int, int] = (0, 0, 0)

    def _groups(self) -> dict[str, list[int]]:
        groups = {"self": [os.getpid()]}
        if self.shell_pid is not None:  # with its children: a shell of several processes (shell.toml `processes`)
            groups["shell"] = [self.shell_pid, *children_of(self.shell_pid)]
        if self.postmaster_pid is not None:
            groups["postgres"] = children_of(self.postmaster_pid)
        return groups

    def _sample(self) -> dict[str, dict[int, int]]:
        out: dict[str, dict[int, int]] = {}
        for name, pids in self._groups().items():
            out[name] = {pid: t for pid in pids if (t := _cpu_ticks(pid)) is not None}
        return out

    def _wal(self) -> tuple[int, float]:
        assert self.wal_dsn is not None
        with psycopg.connect(self.wal_dsn, autocommit=True) as conn:
            row = conn.execute("select wal_sync, wal_sync_time from pg_stat_wal").fetchone()
        assert row is not None
        return int(row[0]), float(row[1])

    def start(self) -> None:
        if self.wal_dsn is not None:
            self._wal0 = self._wal()
        self._start = self._sample()
        self._t0 = time.monotonic()
        self._busy0 = _machine_busy()

    def stop(self) -> dict[str, float]:
        end = self._sample()
        wall = time.monotonic() - self._t0
        busy1 = _machine_busy()
        result: dict[str, float] = {}
        for name, pids in end.items():
            before = self._start.get(name, {})
            ticks = sum(t - before[pid] for pid, t in pids.items() if pid in before)
            result[name] = ticks / _TICK / wall if wall > 0 else math.nan
        if self.wal_dsn is not None:
            syncs, ms = self._wal()
            result["wal_syncs"] = (syncs - self._wal0[0]) / wall
            result["wal_sync_ms"] = (
                (ms - self._wal0[1]) / (syncs - self._wal0[0]) if syncs > self._wal0[0] else math.nan
            )
        total = busy1[2] - self._busy0[2]
        if total:
            result["machine"] = (busy1[0] - self._busy0[0]) / total
            result["steal"] = (busy1[1] - self._busy0[1]) / total
            cores = result["machine"] * (os.cpu_count() or 1)
            result["rest"] = max(0.0, cores - sum(v for k, v in result.items() if k in ("self", "shell", "postgres")))
        return result

    def stop_as(self, shell_name: str) -> dict[str, float]:
        """stop(), with the `shell` group renamed (e.g. to the pgbench client it metered)."""
        result = self.stop()
        if "shell" in result:
            result[shell_name] = result.pop("shell")
        return result


def cpu_meter(env: Env, pid: int | None) -> CpuMeter:
    """A CPU meter of this load generator, `pid` (the shell, or pgbench) and PostgreSQL, with WAL fsyncs."""
    return CpuMeter(pid, env.cluster.pid, env.dsn("postgres"))


CONTENDED_REST = 0.25  # cores other work took during a window
CONTENDED_STEAL = 0.10  # share of all cores the hypervisor took


def contended(cpu: Mapping[str, float] | None) -> bool:
    """Did other work on the machine, or the hypervisor, take a noticeable share of the window?"""
    if not cpu:
        return False
    return cpu.get("rest", 0.0) >= CONTENDED_REST or cpu.get("steal", 0.0) >= CONTENDED_STEAL


CONTENDED_NOTE = (
    f"⚠ marks a window in which other work on the machine took ≥ {CONTENDED_REST} cores or the hypervisor stole "
    f"≥ {CONTENDED_STEAL * 100:.0f} % of the cores: its numbers are contended, compare them with care."
)


def cpu_cell(cpu: Mapping[str, float] | None) -> str:
    """`gen 0.90 / shell 0.70 / pg 0.40 / rest 0.05 · 98 % (steal 1 %)`: cores per group, then the
    machine's busy share of all cores and the share the hypervisor stole."""
    if not cpu:
        return "—"
    parts = []
    for key, label in (
        ("self", "gen"),
        ("shell", "shell"),
        ("pgbench", "pgbench"),
        ("postgres", "pg"),
        ("rest", "rest"),
    ):
        if key in cpu:
            parts.append(f"{label} {cpu[key]:.2f}")
    busy = f"{cpu.get('machine', math.nan) * 100:.0f} %"
    mark = "⚠ " if contended(cpu) else ""
    return mark + " / ".join(parts) + f" · {busy} (steal {cpu.get('steal', math.nan) * 100:.0f} %)"


def wal_cell(cpu: Mapping[str, float] | None, rate: float | None = None) -> str:
    """`1,234/s · 0.81 ms` WAL fsyncs per second and their mean duration (pg_stat_wal, approximate:
    backends report at most once a second), then commits per fsync when `rate` is commits/s."""
    if not cpu or "wal_syncs" not in cpu:
        return "—"
    text = f"{cpu['wal_syncs']:,.0f}/s · {cpu['wal_sync_ms']:.2f} ms"
    if rate and cpu["wal_syncs"]:
        text += f" · {rate / cpu['wal_syncs']:.1f}"
    return text


def per_call(cpu: Mapping[str, float] | None, key: str, rate: float) -> str:
    """CPU microseconds a group of processes spent per operation (cores / operations per second)."""
    if not cpu or key not in cpu or not rate:
        return "—"
    return f"{cpu[key] / rate * 1e6:,.0f}"
