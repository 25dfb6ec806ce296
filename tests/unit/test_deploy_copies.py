"""Each function's sqitch deploy script is a frozen copy of its db/functions file (docs/architecture.md §2):
editing a function without re-running scripts/sync_functions.py fails here. Touches: nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_deploy_revert_verify_scripts_match_their_function_files() -> None:
    out = subprocess.run(
        [sys.executable, REPO / "scripts" / "sync_functions.py", "--check"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr


def test_every_function_file_is_a_change_of_the_plan() -> None:
    plan = (REPO / "sqitch.plan").read_text().splitlines()
    changes = {line.split()[0] for line in plan if line and not line.startswith(("%", "#", "@"))}
    files = {
        p.relative_to(REPO / "db" / "functions").with_suffix("").as_posix()
        for p in (REPO / "db" / "functions").rglob("*.sql")
    }
    assert files <= changes, f"function files missing from sqitch.plan: {sorted(files - changes)}"
    for change in changes:
        for folder in ("deploy", "revert", "verify"):
            assert (REPO / "db" / folder / f"{change}.sql").is_file(), f"{folder} script of {change} missing"
