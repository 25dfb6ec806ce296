"""(n) A Worker soak: one real `qinglong-worker run` through `--soak-runs` (20,000) short Runs against the shell as
its own process — a tenth fail, one in a hundred prints a MiB, one in 400 times out — SIGKILLed and restarted three
times, with one disk-full episode on the small tmpfs that holds its work_dir; its RSS, open descriptors, journal
and work_dir sampled every second, every Run checked against the database and the tasks' own record of their
executions. The engine is test support (tests/support/soak.py: what it counts and how); it runs short in
tests/integration/worker/test_soak.py. Its table for RESULTS.md and its key in bench/results.json (`soak`).

Its own cluster, fsync off: what is measured is the Worker, whose pace is one pull a tick; the database's
commits are not what this part is about (the other parts measure them with fsync on).
Touches: what the engine touches, a folder of the bench environment (its cluster under it), bench/results.json
(key `soak`). Needs root (the tmpfs mount).
"""

from __future__ import annotations

from typing import Any, Final

from bench.report import Result, record_json, table
from qinglong.devdb import Cluster
from tests.support.env import Env, new_env, start_and_deploy
from tests.support.progress import say
from tests.support.soak import SoakConfig, run_soak

KEYS: Final = (
    "runs", "worker_rss_start_mib", "worker_rss_end_mib", "worker_rss_growth_pct", "worker_fds_max",
    "journal_records_end", "journal_bytes_end", "work_dir_bytes_end", "disk_full_episodes", "lost", "stuck",
    "duplicated", "worker_idle_rss_mib",
)  # fmt: skip


def run(env: Env, runs: int, seconds: float | None = None) -> Result:
    """Part (n) of `make bench`: the engine on a cluster of its own (fsync off) beside the bench cluster."""
    root = env.root / "soak"
    root.mkdir()
    cluster = Cluster(root / "pg", fsync=False, preload_cron=False)
    say(f"(n) soak: one Worker through {runs} Runs, 3 SIGKILL restarts, one disk-full episode")
    try:
        start_and_deploy(cluster, "soak")
        counts = run_soak(new_env(root, cluster), "soak", SoakConfig(runs=runs, max_seconds=seconds), root / "engine")
    finally:
        cluster.stop()
    figures = {k: counts[k] for k in KEYS} | {k: v for k, v in counts.items() if k not in KEYS}
    record_json("soak", figures)
    return Result(render(counts), summary(counts), {"soak": figures})


def summary(c: dict[str, Any]) -> list[str]:
    return [
        f"(n) soak: {c['runs']} Runs in {c['seconds']:.0f} s; Worker RSS {c['worker_rss_start_mib']} → "
        f"{c['worker_rss_end_mib']} MiB ({c['worker_rss_growth_pct']:+} %), idle {c['worker_idle_rss_mib']} MiB, "
        f"fds ≤ {c['worker_fds_max']}; lost {c['lost']}, stuck {c['stuck']}, duplicated {c['duplicated']}"
    ]


def render(c: dict[str, Any]) -> str:
    cfg = c["config"]
    w = c["worker_rss_window_runs"]
    rows = [
        ["Runs", f"{c['runs']:,}", ", ".join(f"{k} {v:,}" for k, v in c["kinds"].items())
         + f"; {c['seconds']:.0f} s, {c['runs_per_s']} Runs/s"],
        ["Worker RSS start → end", f"{c['worker_rss_start_mib']} → {c['worker_rss_end_mib']} MiB",
         f"medians of the first and last tenth of the samples from Run {w[0]:,} to {w[1]:,} ended (the last "
         f"process, after a warm-up of a tenth of the Runs); bound ≤ +10 %" if w else ""],
        ["Worker RSS growth", f"{c['worker_rss_growth_pct']:+} %", "must be ≤ 10"],
        ["Worker RSS max", f"{c['worker_rss_max_mib']} MiB", "any sample of any of its processes"],
        ["Worker idle RSS", f"{c['worker_idle_rss_mib']} MiB",
         f"fresh {c['worker_idle_rss_fresh_mib']} MiB, after the soak {c['worker_idle_rss_after_mib']} MiB "
         "(VmRSS after 8 s of ticks with no work); must be ≤ 35"],
        ["open descriptors", f"≤ {c['worker_fds_max']}", f"{c['worker_fds_end']} at the end (/proc/<pid>/fd)"],
        ["journal records", f"{c['journal_records_end']}", f"max {c['journal_records_max']} (journal_keep_records "
         "100, journal_keep_seconds 0)"],
        ["journal bytes", f"{c['journal_bytes_end']:,}", f"max {c['journal_bytes_max']:,} (database, WAL, shm)"],
        ["bytes under work_dir", f"{c['work_dir_bytes_end']:,}", f"max {c['work_dir_bytes_max']:,} "
         "(keep_files_seconds 0, keep_failed_files_seconds 0)"],
        ["disk-full episodes", str(c["disk_full_episodes"]),
         f"a filler left less than min_free_mib ({cfg['min_free_mib']}) free on the {cfg['tmpfs_mib']} MiB tmpfs: "
         "disk.low, nothing pulled, then disk.ok"],
        ["Worker restarts", str(c["worker_restarts"]), "SIGKILL, restarted at once: it adopts its running tasks"],
        ["lost", str(c["lost"]), "must be 0: ended without an execution, or an Attempt lost"],
        ["stuck", str(c["stuck"]), "must be 0: not ended after the drain"],
        ["duplicated", str(c["duplicated"]), "must be 0: the task recorded more than one execution"],
        ["wrong outcomes", str(c["wrong_outcomes"]), "must be 0: status (and exit code) other than its kind's"],
        ["settings", ", ".join(f"{k}={v}" for k, v in cfg.items()), f"{c['samples']:,} samples, one a second"],
    ]  # fmt: skip
    return "## (n) A Worker soak\n\n" + table(["figure", "value", "what"], rows)
