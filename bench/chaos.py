"""(e) Chaos on real parts, ≥ 500 Runs: the engine of tests.support.chaos at full size on its own database
of the bench cluster, its table for RESULTS.md and its key in bench/results.json. What the engine does and
counts: tests/support/chaos/__init__.py and bench/README.md, part (e). Touches what the engine touches, a
database and a folder of the bench environment, and bench/results.json (key `chaos`).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from bench.report import Result, record_json, table
from tests.support.chaos.analysis import ZEROS
from tests.support.chaos.config import ChaosConfig
from tests.support.chaos.engine import run_chaos
from tests.support.env import Env
from tests.support.progress import say


def run(env: Env, runs: int) -> Result:
    """Part (e) of `make bench`: the engine at full size on its own database of the bench cluster."""
    env.create_database("chaos")
    say(f"(e) chaos: {runs} Runs, 3 Workers behind fault proxies, kills, freezes, a deleted journal")
    root = env.root / "chaos"
    root.mkdir()
    config = ChaosConfig(runs=runs)
    counts = run_chaos(env, "chaos", config, root)
    record_json("chaos", counts)
    return Result(render(counts), summary(counts), {"chaos": counts})


def summary(c: dict[str, Any]) -> list[str]:
    zeros = ", ".join(f"{k} {c[k]}" for k in ZEROS)
    return [
        f"(e) chaos: {c['runs']} Runs in {c['seconds']:.0f} s, {c['lost_answers_injected']} lost answers, "
        f"{c['worker_kills']} Worker kills; {zeros}; max stop lag after local expiry "
        f"{c['max_stop_lag_after_local_expiry_s']:.2f} s"
    ]


def render(c: dict[str, Any]) -> str:
    cfg = c["config"]
    bound = cfg["tick_s"] + cfg["stop_grace_s"] + 1.0
    rows = [
        ["Runs", f"{c['runs']:,}", "queued through the user API, each its own Task"],
        ["lost answers injected", f"{c['lost_answers_injected']:,}", "answers cut after the shell committed"],
        ["Worker kills", f"{c['worker_kills']:,}",
         f"SIGKILL + restart: {c['worker_faults']['kill']} soon, "
         f"{c['worker_faults']['kill_long']} after > TTL + grace, "
         f"{c['worker_faults']['journal']} after its journal was deleted"],
        ["healthy tasks stopped", str(c["healthy_tasks_stopped"]), "must be 0"],
        ["reruns after exit 0", str(c["reruns_after_exit0"]), "must be 0"],
        ["spawned after cancel", str(c["spawned_after_cancel"]), "must be 0"],
        ["overlapping executions", str(c["overlapping_executions"]), "must be 0"],
        ["max stop lag after local expiry", f"{c['max_stop_lag_after_local_expiry_s']:.2f} s",
         f"over {c['stops_after_local_expiry']} tasks that outlived their local expiry; bound tick + stop grace + 1 s "
         f"= {bound:.1f} s"],
        ["stuck", str(c["stuck"]), "must be 0"],
        ["duplicate events", str(c["duplicate_events"]), "must be 0"],
        ["wrong outcomes", str(c["wrong_outcomes"]), "must be 0"],
        ["Runs not ended exactly once", str(c["ended_not_once"]), "must be 0"],
    ]  # fmt: skip
    other = [
        ["final statuses", ", ".join(f"{k} {v}" for k, v in c["statuses"].items())],
        ["Run kinds", ", ".join(f"{k} {v}" for k, v in c["kinds"].items())],
        ["executions · Attempts · lost Attempts", f"{c['executions']} · {c['attempts']} · {c['lost_attempts']}"],
        ["cancels sent · accepted · accepted before the start",
         f"{c['cancels_sent']} · {c['cancels_accepted']} · {c['cancels_accepted_before_start']}"],
        ["requests through the proxies · connections",
         f"{c['requests_through_proxies']:,} · {c['proxy_connections']:,}"],
        ["answers cut midway · stalls · resets",
         f"{c['cut_answers_injected']} · {c['stalls_injected']} · {c['resets_injected']}"],
        ["Worker freezes (SIGSTOP/SIGCONT)", str(c["worker_faults"]["stop"])],
        ["deleted journal: failed closed · requests after",
         f"{c['journal_fail_closed']} · {c['requests_after_fail_closed']}"],
        ["convergence calls · errors", f"{c['converge_calls']} · {c['converge_errors']}"],
        ["settings", ", ".join(f"{k}={v}" for k, v in cfg.items())],
        ["seed · seconds", f"{c['seed']} · {c['seconds']}"],
    ]  # fmt: skip
    return (
        "## (e) Chaos on real parts\n\n"
        "PostgreSQL (fsync on), the shell as its own process and "
        f"{cfg['workers']} `qinglong-worker run` processes, each behind its own TCP fault proxy that loses answers "
        "after the shell committed, cuts answers midway, stalls answers and resets connections; Workers are "
        "SIGKILLed and restarted (some only after the Lease TTL + the reconciliation grace), frozen with SIGSTOP, "
        "and one journal is deleted under its Worker. `CALL ql_api.converge(…)` runs every 0.5 s as ql_scheduler. "
        "Every count below is measured from the tasks' own records (flock, start/end lines), the runner "
        "wrappers' files and the database's rows; definitions in bench/README.md. The same engine runs short in "
        "tests/integration/test_chaos.py, which asserts the zeros.\n\n"
        f"{table(['count', 'measured', ''], rows)}\n\n{table(['also measured', ''], other)}\n"
    )


if __name__ == "__main__":  # pragma: no cover - a manual entry point for one chaos run
    from bench.cluster import environment

    with environment() as bench_env:
        print(json.dumps(run(bench_env, int(sys.argv[1]) if len(sys.argv) > 1 else 50).data, indent=2))
