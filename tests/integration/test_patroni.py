"""Failover, short (the long run: bench/failover.py): a Patroni cluster on one machine (three PostgreSQL nodes
under Debian's Patroni and one etcd, synchronous_mode, pg_cron preloaded on every node) failing over once
under load — the engine of tests.support.chaos.failover: the real shell and three real Workers connecting with
a multi-host DSN and `target_session_attrs=read-write`, users enqueueing and cancelling, convergence running,
and the leader's postmaster SIGKILLed. Asserted: no acknowledged transition lost, no duplicated event, no task
stopped because of the failover, no Run stuck, a bounded unavailability window, and pg_cron's convergence ran
on the new leader after its promotion.

Touches: a fresh 0755 folder under /tmp (removed), loopback ports, the processes it starts (etcd, Patroni and
its postgres servers, the shell, the Workers, their tasks). About 2 minutes on 2 cores (up to a minute of it
waits for pg_cron's minute).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.chaos.analysis import ZEROS
from tests.support.chaos.failover import FAILOVER_ZEROS, FailoverConfig, run_failover

pytestmark = [pytest.mark.patroni]

TMP = Path("/tmp")  # noqa: S108  (world-traversable, unlike pytest's tmp_path)
CONFIG = FailoverConfig(failovers=1, gap_s=8.0, drain_s=40.0)
MAX_UNAVAILABLE_S = 15.0  # ttl 10 bounds the DCS side; a crash is seen within loop_wait 1


@pytest.fixture
def root() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="ql-patroni-", dir=TMP))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_one_failover_under_load_loses_nothing(root: Path) -> None:
    counts = run_failover(root, CONFIG)
    shown = json.dumps(counts, indent=1, sort_keys=True)
    print(shown)
    assert counts["failovers"] == 1, shown
    assert counts["runs"] >= 20, shown
    assert counts["unmatched_executions"] == 0, shown
    for key in (*FAILOVER_ZEROS, *ZEROS):
        assert counts[key] == 0, f"{key} = {counts[key]}\n{shown}"
    assert 0 < counts["max_unavailable_s"] <= MAX_UNAVAILABLE_S, shown  # the probe did see the failover
    assert counts["cron_resumed_on_new_leader"] is True, shown
    assert counts["cron_failed_runs"] == 0, shown
    assert counts["cron_runs_on_standbys"] == 0, shown
