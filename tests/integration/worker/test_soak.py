"""A Worker soak, short (the long run: bench/soak.py, part (m)): the engine of tests.support.soak at 200 Runs — one
real `qinglong-worker run` against the shell as its own process, a tenth of the tasks failing, some printing a
MiB, two timing out, the Worker SIGKILLed and restarted once and, as root, one disk-full episode on the tmpfs
that holds its work_dir. Asserted on what was measured: nothing lost, stuck, duplicated or wrongly ended; RSS
after the warm-up grows by at most a fifth (a loose bound for a short run; the long one is held to 10 %) and
stays under 35 MiB idle; open descriptors bounded; the journal holds its kept records; work_dir is back to
(almost) nothing once retention has run.
Touches: a fresh database of the session cluster, tmp_path (and a tmpfs mounted under it, as root), loopback
ports, the processes it starts (this process is their child subreaper meanwhile). About 60 s on 2 cores.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import Database
from tests.support.env import new_env
from tests.support.soak import SoakConfig, run_soak

pytestmark = pytest.mark.db

CONFIG = SoakConfig(
    runs=200,
    capacity=8,
    backlog=64,
    mib_every=50,
    fail_every=10,
    timeout_every=100,
    restarts=1,
    disk_full=os.geteuid() == 0,
    tmpfs_mib=64,
    min_free_mib=24,
    disk_full_hold_s=1.5,
    sample_every_s=0.5,
    idle_s=4.0,
    drain_s=60.0,
)


def test_a_short_soak_loses_nothing_and_stays_flat(database: Database, tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    env = new_env(tmp_path, database.cluster)
    c = run_soak(env, database.name, CONFIG, tmp_path / "soak")
    shown = json.dumps(c, indent=1, sort_keys=True)
    print(shown)
    assert c["runs"] == CONFIG.runs and c["executions"] >= CONFIG.runs - c["ended_unstarted_by_a_restart"], shown
    for key in ("lost", "stuck", "duplicated", "wrong_outcomes"):
        assert c[key] == 0, f"{key} = {c[key]}\n{shown}"
    assert c["worker_restarts"] == 1, shown
    assert c["disk_full_episodes"] == (1 if CONFIG.disk_full else 0), shown
    assert c["samples"] >= 20, shown
    assert c["worker_rss_growth_pct"] <= 20, shown
    assert c["worker_idle_rss_mib"] <= 35, shown
    assert c["worker_fds_max"] <= 32, shown
    assert c["journal_records_end"] <= 100 + CONFIG.capacity, shown
    assert c["work_dir_bytes_end"] <= 64 * 1024, shown
