"""`python -m bench.run`: the benchmark command (not a test). One fresh PostgreSQL cluster with
fsync on for the whole run, then (a) lease renewals, (b) Run lifecycles beside Procrastinate, (c)
cancellation convergence, (d) a Worker supervising its journal, (e) chaos on real parts (lost answers,
killed and frozen Workers, a deleted journal; bench/chaos.py, also bench/results.json), (f) a connection
flood against the shell's default connection budgets (bench/flood.py, also bench/results.json), (g) failovers
of a Patroni cluster under load (bench/failover.py, its own three-node cluster, also bench/results.json),
(h) the performance figures (bench/perf.py: a renewal soak, the retry scan, and the figures of (a) and
(b) combined, also bench/results.json under `perf`), (i) Project secrets searched for everywhere after ten or
more tasks used and printed them (bench/secrets.py, its own cluster, also bench/results.json under `secrets`),
(j) bundles fetched and cached and every bundle and plan attack refused (bench/bundles.py, its own cluster, also
bench/results.json under `bundles`), (k) retention beside live writers, partitions with no maintenance for a year
and output trims under an open snapshot (bench/retention.py, also bench/results.json under `retention`), (l)
second-level schedules against the clock (bench/schedules.py, also bench/results.json under `notify`), (m)
notifications through the outbox with the receiver down for a while (bench/notify.py, merged into the same key),
(n) one Worker soaked through 20,000 Runs with restarts and a disk-full episode (bench/soak.py, its own cluster,
also bench/results.json under `soak`).
Prints progress and each table, and writes bench/RESULTS.md with the machine, the command and the ratios
measured in this run.

Touches: a temporary folder under /tmp (removed), the processes it starts, loopback ports,
bench/RESULTS.md, and .venv (it installs the benchmark-only extra `bench` when Procrastinate is
missing).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import importlib
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from bench.cluster import environment
from bench.report import Result, machine, table
from tests.support.env import REPO, ShellProcess
from tests.support.progress import say

RESULTS = REPO / "bench" / "RESULTS.md"
PARTS = ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n")


def ensure_procrastinate() -> str:
    """Import Procrastinate, installing the `bench` dependency group (pyproject.toml, the one place the
    pin lives) into this interpreter's environment first when it is missing; its version."""
    try:
        module = importlib.import_module("procrastinate")
    except ImportError:
        say("installing the benchmark-only group: pip install --group bench")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--group", "bench"], cwd=REPO, check=True)
        importlib.invalidate_caches()
        module = importlib.import_module("procrastinate")
    from importlib.metadata import version

    del module
    return version("procrastinate")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=10.0, help="measured window of each phase (default 10)")
    p.add_argument("--runs", type=int, default=100_000, help="cancelled queued Runs to converge in (c)")
    p.add_argument("--ticks", type=int, default=100, help="Worker ticks measured in (d)")
    p.add_argument("--records", type=int, default=1000, help="journal records in (d)")
    p.add_argument("--chaos-runs", type=int, default=500, help="Runs of the chaos engine in (e) (default 500)")
    p.add_argument("--flood-seconds", type=float, default=30.0, help="length of the flood in (f) (default 30)")
    p.add_argument("--secrets", type=int, default=30, help="secrets used and searched for in (i) (default 30)")
    p.add_argument("--bundle-mib", type=int, default=16, help="the bundle fetched in (j), in MiB (default 16)")
    p.add_argument("--retention-runs", type=int, default=100_000, help="old Runs pruned in (k) (default 100000)")
    p.add_argument("--schedules", type=int, default=40, help="tasks scheduled every second in (l) (default 40)")
    p.add_argument("--schedule-seconds", type=float, default=70.0, help="how long (l) runs (default 70)")
    p.add_argument("--notify-events", type=int, default=300, help="failed Runs notified in (m) (default 300)")
    p.add_argument("--notify-down-seconds", type=float, default=10.0, help="the receiver's outage in (m) (default 10)")
    p.add_argument("--soak-runs", type=int, default=20_000, help="Runs of the Worker soak in (n) (default 20000)")
    p.add_argument("--soak-seconds", type=float, help="(n) queues no more Runs after this long (default: no limit)")
    p.add_argument("--failovers", type=int, default=10, help="leader kills in (g) (default 10)")
    p.add_argument("--only", default=",".join(PARTS), help="benchmarks to run, e.g. a,c (default all)")
    p.add_argument("--output", type=Path, default=RESULTS, help="where to write the results (default bench/RESULTS.md)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    only = {part.strip() for part in args.only.split(",") if part.strip()}
    if not only <= set(PARTS):
        raise SystemExit(f"--only takes a subset of {','.join(PARTS)}")
    started = time.monotonic()
    load = os.getloadavg()
    python = Path(sys.executable)
    shown = python.relative_to(REPO) if python.is_relative_to(REPO) else python
    command = f"{shown} -m bench.run"  # run from the checkout; no machine path in RESULTS.md
    command += " " + shlex.join(sys.argv[1:] if argv is None else argv) if (argv or sys.argv[1:]) else ""
    procrastinate_version = ensure_procrastinate() if "b" in only else None
    host = machine()
    results: list[Result] = []
    measured: dict[str, dict[str, object]] = {}
    with environment() as env:
        if only & {"a", "b"}:
            env.create_database("qinglong")
            env.shell = ShellProcess(env, "qinglong")
            env.shell.start()
            say(f"shell serving (pid {env.shell.pid}): worker ingress {env.shell.origin}")
        if "a" in only:
            from bench import lease_renewals

            results.append(asyncio.run(lease_renewals.run(env, args.seconds)))
            measured["a"] = results[-1].data
        if "b" in only:
            from bench import lifecycles

            results.append(asyncio.run(lifecycles.run(env, args.seconds)))
            measured["b"] = results[-1].data
        if env.shell is not None:
            env.shell.stop()
            env.shell = None
        if "h" in only:
            from bench import perf

            results.append(asyncio.run(perf.run(env, args.seconds, measured.get("a", {}), measured.get("b", {}))))
        if "c" in only:
            from bench import convergence

            results.append(convergence.run(env, args.runs))
        if "d" in only:
            from bench import worker_supervision

            results.append(worker_supervision.run(env.root, args.records, args.ticks))
        if "e" in only:
            from bench import chaos

            results.append(chaos.run(env, args.chaos_runs))
        if "f" in only:
            from bench import flood

            results.append(flood.run(env, args.flood_seconds))
        if "i" in only:
            from bench import secrets

            results.append(secrets.run(env, args.secrets))
        if "j" in only:
            from bench import bundles

            results.append(bundles.run(env, args.bundle_mib))
        if "k" in only:
            from bench import retention

            results.append(retention.run(env, args.retention_runs))
        if "l" in only:
            from bench import schedules

            results.append(schedules.run(env, args.schedules, args.schedule_seconds))
        if "m" in only:
            from bench import notify

            results.append(notify.run(env, args.notify_events, args.notify_down_seconds))
        if "n" in only:
            from bench import soak

            results.append(soak.run(env, args.soak_runs, args.soak_seconds))
        if "g" in only:
            from bench import failover

            results.append(failover.run(args.failovers))
        pg_settings = dict(env.settings)
    total = time.monotonic() - started
    host["load average at start"] = " ".join(f"{x:.2f}" for x in load)
    text = render(results, host, pg_settings, command, total, procrastinate_version)
    text += kept_sections(args.output, only)
    args.output.write_text(text)
    say(f"wrote {args.output} — total {total:.0f} s")
    print()
    for result in results:
        for line in result.summary:
            print(line)
    return 0


def kept_sections(path: Path, ran: set[str]) -> str:
    """The sections `## (x) …` of an existing results file for the parts this command did not run, so a
    partial run (`--only e`) does not erase the others; each is marked as coming from the earlier run."""
    if ran == set(PARTS) or not path.exists():
        return ""
    kept: list[str] = []
    for chunk in path.read_text().split("\n## (")[1:]:
        part = chunk[:1]
        if part in PARTS and part not in ran:
            note = "" if "*(kept from an earlier run" in chunk else "*(kept from an earlier run of the command)*\n\n"
            title, _, body = chunk.partition("\n\n")
            kept.append(f"\n## ({title}\n\n{note}{body.rstrip()}\n")
    return "".join(kept)


def render(
    results: list[Result],
    host: dict[str, str],
    pg: dict[str, str],
    command: str,
    total: float,
    procrastinate_version: str | None,
) -> str:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine_rows = [[k, v] for k, v in host.items()]
    machine_rows.append(["PostgreSQL settings", ", ".join(f"{k}={v}" for k, v in sorted(pg.items()))])
    if procrastinate_version:
        machine_rows.append(["Procrastinate", procrastinate_version])
    head = (
        "# Benchmark results\n\n"
        f"Written by `{command}` on {now}; the whole command took {total:.0f} s.\n\n"
        "One fresh PostgreSQL cluster with **fsync on** (devdb defaults otherwise) served every benchmark. "
        "This is a shared 2-core machine: absolute numbers are noise from run to run, and the load generator, "
        "the shell and PostgreSQL compete for the same cores. **The ratios, measured in the same run on the same "
        "cluster, are the point.** Regenerate with `make bench`.\n\n"
        f"{table(['machine', ''], machine_rows)}\n"
    )
    return head + "\n" + "\n".join(r.markdown for r in results)


if __name__ == "__main__":
    sys.exit(main())
