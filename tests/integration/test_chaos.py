"""Chaos on real parts, short (the long run: bench/chaos.py): the engine of tests.support.chaos at about 36 Runs —
the real shell as its own process, three `qinglong-worker run` processes behind TCP fault proxies that
lose answers after the shell committed, cut, stall and reset; Workers SIGKILLed and restarted (once past
the Lease TTL + grace), frozen with SIGSTOP, one journal deleted under its Worker. Every zero of
decision 0004 is asserted on counts measured from the tasks' own records and the database.
Touches: a fresh database of the session cluster, tmp_path, loopback ports, the processes it starts
(this process is their child subreaper meanwhile). About 60-90 s on 2 cores.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import Database
from tests.support.chaos.analysis import ZEROS
from tests.support.chaos.config import ChaosConfig
from tests.support.chaos.engine import run_chaos
from tests.support.env import new_env

pytestmark = pytest.mark.db

CONFIG = ChaosConfig(
    runs=36,
    workers=3,
    capacity=3,
    tick_s=0.3,
    stop_grace_s=1.0,
    lease_ttl_ms=3000,
    offer_ttl_ms=3000,
    reconcile_grace_ms=2500,
    max_active=14,
    cancel_share=0.2,
    p_lose_answer=0.05,
    p_cut_answer=0.02,
    p_stall=0.02,
    p_reset=0.02,
    fault_every_s=3.0,
    submit_every_s=1.0,
    drain_s=40.0,
)


def test_chaos_keeps_every_zero(database: Database, tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    env = new_env(tmp_path, database.cluster)
    counts = run_chaos(env, database.name, CONFIG, tmp_path / "chaos")
    shown = json.dumps(counts, indent=1, sort_keys=True)
    print(shown)
    assert counts["runs"] >= 30, shown
    assert counts["lost_answers_injected"] > 0, shown
    assert counts["worker_kills"] > 0, shown
    assert counts["journal_fail_closed"] is True and counts["requests_after_fail_closed"] == 0, shown
    assert counts["unmatched_executions"] == 0, shown
    for key in ZEROS:
        assert counts[key] == 0, f"{key} = {counts[key]}\n{shown}"
    bound = CONFIG.tick_s + CONFIG.stop_grace_s + 1.0
    assert counts["max_stop_lag_after_local_expiry_s"] <= bound, shown
