"""(g) Failovers of a Patroni cluster under load, ≥ 10: the engine of tests.support.chaos.failover at full
size, its table for RESULTS.md and its key in bench/results.json. Touches what that engine touches, a
temporary folder under /tmp (removed) and bench/results.json (key `failover`).
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Any

from bench.report import Result, record_json, table
from tests.support.chaos.analysis import ZEROS
from tests.support.chaos.failover import FAILOVER_KEYS, FailoverConfig, run_failover
from tests.support.progress import say


def run(failovers: int) -> Result:
    """Part (g) of `make bench`: its own Patroni cluster (not the bench cluster), ≥ 10 failovers."""
    say(f"(g) failover: a Patroni cluster of 3 nodes, {failovers} SIGKILLs of the leader's postmaster under load")
    root = Path(tempfile.mkdtemp(prefix="qinglong-failover-", dir="/tmp"))
    root.chmod(0o755)
    try:
        counts = run_failover(root, FailoverConfig(failovers=failovers))
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)
    record_json("failover", {k: counts[k] for k in FAILOVER_KEYS})
    return Result(render(counts), summary(counts), {"failover": counts})


def summary(c: dict[str, Any]) -> list[str]:
    figures = ", ".join(f"{k} {c[k]}" for k in FAILOVER_KEYS)
    return [f"(g) failover: {figures}; pg_cron resumed on the new leader: {c['cron_resumed_on_new_leader']}"]


def render(c: dict[str, Any]) -> str:
    rows = [
        ["failovers", str(c["failovers"]), "SIGKILL of the leader's postmaster, each once the cluster was healthy"],
        ["acknowledged transitions lost", str(c["acknowledged_lost"]), "must be 0"],
        ["duplicated events", str(c["duplicate_events"]), "must be 0"],
        ["tasks stopped because of a failover", str(c["tasks_stopped"]), "must be 0"],
        ["Runs stuck", str(c["stuck"]), f"must be 0 ({c['config']['lease_ttl_ms'] / 1000:.0f} s Lease TTL)"],
        ["longest wait of a user for a 2xx answer", f"{c['max_unavailable_s']:.1f} s",
         "per failover: " + ", ".join("-" if w is None else f"{w:.1f}" for w in c["unavailable_s"])],
        ["kill → new leader (Patroni REST)", f"max {max(c['promotion_s'], default=0):.1f} s",
         ", ".join(f"{x:.1f}" for x in c["promotion_s"])],
        ["pg_cron's convergence on the last leader", "ran" if c["cron_resumed_on_new_leader"] else "did not run",
         "job runs per leader epoch: " + ", ".join(map(str, c["cron_runs_per_leader"]))
         + f"; job starts on a standby: {c['cron_runs_on_standbys']}"],
    ]  # fmt: skip
    other = [
        ["Runs · executions · Attempts", f"{c['runs']} · {c['executions']} · {c['attempts']}"],
        ["final statuses", ", ".join(f"{k} {v}" for k, v in c["statuses"].items())],
        ["other zeros of the chaos engine", ", ".join(f"{k} {c[k]}" for k in ZEROS if k not in FAILOVER_KEYS)],
        ["user requests answered 5xx or refused (retried) · probe answers",
         f"{c['user_requests_retried']} · {c['probe_answers']}"],
        ["convergence calls · errors (0.5 s loop)", f"{c['converge_calls']} · {c['converge_errors']}"],
        ["seed · seconds", f"{c['seed']} · {c['seconds']}"],
    ]  # fmt: skip
    return (
        "## (g) Failover under load (Patroni)\n\n"
        "Three PostgreSQL nodes under Debian's Patroni and one etcd on this machine (synchronous_mode, "
        "pg_cron preloaded on every node), the shell and 3 Workers connecting with "
        "`host=…,…,… port=…,…,… target_session_attrs=read-write`; users enqueue and cancel, convergence runs; "
        "the leader's postmaster is SIGKILLed once the cluster is healthy again and 8 s of load later. "
        "Definitions in bench/README.md; also in bench/results.json under `failover`. The same engine runs "
        "one failover in tests/integration/test_patroni.py, which asserts the zeros.\n\n"
        f"{table(['count', 'measured', ''], rows)}\n\n{table(['also measured', ''], other)}\n"
    )


if __name__ == "__main__":  # pragma: no cover - a manual entry point
    import json
    import sys

    tmp = Path(tempfile.mkdtemp(prefix="qinglong-failover-", dir="/tmp"))
    tmp.chmod(0o755)
    print(json.dumps(run_failover(tmp, FailoverConfig(failovers=int(sys.argv[1]) if sys.argv[1:] else 1)), indent=1))
