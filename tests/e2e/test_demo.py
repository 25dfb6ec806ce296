"""The embedded demo, as `make demo` runs it: real PostgreSQL (fsync on, pg_cron), sqitch, PKI, the
shell and a Worker as processes, five Runs that must end succeeded, timed_out, cancelled (by the
user, through the Worker), succeeded (after a SIGKILL of the Worker) and cancelled (by pg_cron's
convergence), a scheduled task fired by pg_cron's convergence, and the output of two Runs read back.
Touches: a temporary folder, loopback ports, child processes (all cleaned up).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.db]
REPO = Path(__file__).resolve().parents[2]


def test_the_demo_runs_every_scenario_to_its_expected_end() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "qinglong.cli.demo"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    lines = out.stdout.strip().splitlines()
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert lines[-1] == (
        "PASS: hello succeeded, too-slow timed_out, cancel-me cancelled, survivor succeeded, unserved cancelled,"
        " uses-secret succeeded, from-bundle succeeded, tick succeeded"
    )
    text = out.stdout
    assert "run.cancel_requested  system" in text  # the timeout intent came from the database
    assert "reconciler" in text  # pg_cron's convergence ended the unserved Run
    # the survivor was adopted, not started twice; uses-secret; from-bundle; the tick
    assert text.count("attempt.starting") == 7
    assert "\n  variable: ***\n  file: ***\n" in text  # uses-secret's stdout as stored: its secret masked twice
    assert "\n  hello from a Qinglong task\n" in text  # `run logs` of hello: its stdout, as stored
    assert "\n  hello, from a bundle\n" in text  # from-bundle's script came from its bundle (its plan signed)
    assert re.search(r"\n  tick: fired by its schedule at \d\d:\d\d:\d\d UTC\n", text)  # the schedule fired
    assert re.search(r"\n  1  \S+  run\.queued +system ", text)  # the tick's Run was queued by the scheduler
