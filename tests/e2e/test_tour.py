"""The day-one tour, verbatim: every `<!-- tour -->` shell block of README.md, then of docs/operations.md, runs
in `make sandbox`'s system (real PostgreSQL with pg_cron, the shell and a Worker as processes) under `bash -e`,
and what an operator is told to look for is there: a scheduled task that fired, the output of a failed Run
(stdout and stderr apart), its place in the history, an offline Worker.
Touches: a temporary folder, loopback ports, child processes (all cleaned up by the sandbox).
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.db]
REPO = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^( *)<!-- tour -->\n *```sh\n(.*?)\n *```$", re.M | re.S)


def tour_blocks(path: Path) -> list[str]:
    """The `sh` blocks right after a `<!-- tour -->` line, dedented as they are indented in the text."""
    return [textwrap.dedent(m.group(1) + body) for m in BLOCK.finditer(path.read_text()) for body in [m.group(2)]]


def test_the_docs_name_their_tour_blocks() -> None:
    assert len(tour_blocks(REPO / "README.md")) == 1
    assert len(tour_blocks(REPO / "docs" / "operations.md")) >= 1
    assert "qinglong task create" in tour_blocks(REPO / "README.md")[0]


def test_the_tour_runs_verbatim_in_the_sandbox() -> None:
    script = "\n".join(tour_blocks(REPO / "README.md") + tour_blocks(REPO / "docs" / "operations.md"))
    out = subprocess.run(
        [sys.executable, "-m", "qinglong.cli.demo", "--sandbox", "--", "bash", "-e", "-c", script],
        cwd=REPO, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    said = out.stdout + out.stderr
    assert out.returncode == 0, said[-6000:]

    # the failed Run's output: stdout on stdout, stderr on stderr, as the task wrote them
    def line(text: str, where: str) -> bool:
        return re.search(f"^{re.escape(text)}$", where, re.M) is not None

    assert line("step 1 of 2 done", out.stdout) and not line("step 1 of 2 done", out.stderr)
    assert line("step 2: disk full", out.stderr) and not line("step 2: disk full", out.stdout)
    # the history lists it failed with its exit code; the timeline shows the exit
    assert re.search(r"^\S+\s+failed\s+flaky\s+1\s.*\s3\s+-$", out.stdout, re.M), out.stdout[-4000:]
    # the schedule fired, and that Run's output was read back
    assert re.search(r"^\S+\s+succeeded\s+heartbeat\s", out.stdout, re.M)
    assert re.search(r"^alive at \d\d:\d\d:\d\d$", out.stdout, re.M)
    # the Worker that never connected is offline; the sandbox's own Worker is online
    assert re.search(r"^\S+\s+spare\s+home\s+1\s+active\s+no\s", out.stdout, re.M), out.stdout[-3000:]
    assert re.search(r"^\S+\s+demo-worker\s+default\s+1\s+active\s+yes\s", out.stdout, re.M)
    assert re.search(r"^spare$", out.stdout, re.M)  # docs/operations.md's jq filter of the offline Workers
