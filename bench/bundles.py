"""(j) Bundles and signed plans: the engine of tests.support.bundle_attacks at full size (its own cluster, fsync
on): a 16 MiB bundle (`--bundle-mib`) shipped with `qinglong task create --bundle --sign`, fetched by a real
Worker and run twice (the second Run from its cache), then every bundle attack and every plan not signed as it
runs. Its table for RESULTS.md and its key in bench/results.json (`bundles`: bundle_attacks_tried,
bundle_attacks_spawned, unsigned_plans_tried, unsigned_plans_spawned, fetch_mib, fetch_mib_per_s,
cache_hit_runs). Touches what the engine touches, a folder of the bench environment, and bench/results.json
(key `bundles`).
"""

from __future__ import annotations

from bench.report import Result, record_json, table
from tests.support.bundle_attacks import BundleConfig, run_bundle_attacks
from tests.support.env import Env
from tests.support.progress import say


def run(env: Env, mib: int) -> Result:
    """Part (j) of `make bench`."""
    say(f"(j) bundles: a {mib} MiB bundle fetched and cached, then the attacks")
    found = run_bundle_attacks(env.root / "bundles", BundleConfig(fetch_mib=mib, fsync=True, within_s=300.0))
    counts = found.counts()
    figures = {k: v for k, v in counts.items() if k != "refusals"}
    record_json("bundles", figures)
    rows = [
        ["bundle attacks tried", str(counts["bundle_attacks_tried"]), "tar-slip, links, devices, bombs, damaged or "
         "swapped archives (each under a signed plan)"],
        ["bundle attacks spawned", str(counts["bundle_attacks_spawned"]), "must be 0"],
        ["unsigned plans tried", str(counts["unsigned_plans_tried"]), "unsigned, unknown key, edited after signing, "
         "copied to another Project"],
        ["unsigned plans spawned", str(counts["unsigned_plans_spawned"]), "must be 0"],
        ["writes outside the Run's folder", str(counts["escapes"]), "must be 0"],
        ["fetched", f"{counts['fetch_mib']} MiB", "one bundle, a chunk of 256 KiB per call over the Worker's mTLS"],
        ["fetch rate", f"{counts['fetch_mib_per_s']} MiB/s", "claim to starting ACK, by database time (the fetch "
         "shares the Worker's tick with its other work)"],
        ["fetch ÷ direct SQL", str(counts["fetch_vs_direct_sql"]), "the fetch rate as a share of the same bytes "
         "selected from PostgreSQL over one connection, measured in this run (the limit)"],
        ["cache hit Runs", str(counts["cache_hit_runs"]), "the second Run fetched nothing"],
        ["honest Runs succeeded", f"{counts['honest_runs_succeeded']} of 2", "the script ran from the bundle"],
    ]  # fmt: skip
    refused = ", ".join(f"{name} → {code}" for name, code in sorted(counts["refusals"].items()))
    markdown = ("## (j) Bundles and signed plans\n\n" + table(["figure", "value", "what"], rows)
                + f"\nEach refusal, as the Attempt's start-failure code: {refused}.\n")  # fmt: skip
    summary = [
        f"(j) bundles: {counts['bundle_attacks_spawned']} of {counts['bundle_attacks_tried']} bundle attacks and "
        f"{counts['unsigned_plans_spawned']} of {counts['unsigned_plans_tried']} unsigned plans spawned; "
        f"{counts['fetch_mib']} MiB at {counts['fetch_mib_per_s']} MiB/s; {counts['cache_hit_runs']} cache hit"
    ]
    return Result(markdown, summary, {"bundles": figures})
