"""(i) Project secrets leak nowhere: the engine of tests.support.leaks at full size (its own cluster, fsync on),
its table for RESULTS.md and its key in bench/results.json (`secrets`: secrets_tried, secret_hits,
mask_cases, mask_misses, rotations_under_load, deliveries_to_stale_workers). What the engine does and
searches: tests/support/leaks.py. Touches what the engine touches, a folder of the bench environment, and
bench/results.json (key `secrets`).
"""

from __future__ import annotations

from bench.report import Result, record_json, table
from tests.support.env import Env
from tests.support.leaks import LeakConfig, run_leaks
from tests.support.progress import say


def run(env: Env, count: int) -> Result:
    """Part (i) of `make bench`."""
    config = LeakConfig(secrets=count, rotations=max(2, count // 5), fsync=True, within_s=300.0)
    say(f"(i) secrets: {count} secrets, {config.rotations} rotated under load, a stale Worker asking for each")
    found = run_leaks(env.root / "secrets", config)
    counts = found.counts()
    record_json("secrets", counts)
    rows = [
        ["secrets tried", str(counts["secrets_tried"]), "values set through the user API, each delivered to a task"],
        ["secret hits", str(counts["secret_hits"]), f"must be 0 (each value and its encodings, in "
         f"{counts['places_searched']} places)"],
        ["mask cases", str(counts["mask_cases"]), "printed forms of a value (raw, base64, percent, JSON, file)"],
        ["mask misses", str(counts["mask_misses"]), "must be 0"],
        ["rotations under load", str(counts["rotations_under_load"]), "set again while the task still printed"],
        ["deliveries to stale Workers", str(counts["deliveries_to_stale_workers"]),
         f"must be 0 (of {counts['stale_calls']} starting ACKs by a Worker without the Lease)"],
        ["control found in", str(counts["control_found_in"]), "places holding a plain --env value (the search works)"],
        ["Runs succeeded", f"{counts['runs_succeeded']} of {counts['runs']}", "one per secret, and the control"],
    ]  # fmt: skip
    markdown = "## (i) Secrets\n\n" + table(["figure", "value", "what"], rows) + "\n"
    summary = [
        f"(i) secrets: {counts['secrets_tried']} tried, {counts['secret_hits']} hits, "
        f"{counts['mask_misses']} mask misses of {counts['mask_cases']}, "
        f"{counts['deliveries_to_stale_workers']} deliveries to stale Workers"
    ]
    return Result(markdown, summary, {"secrets": counts})
