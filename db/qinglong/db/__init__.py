"""The database core as package data: this folder is the sqitch project (sqitch.conf, sqitch.plan,
deploy/, revert/, verify/) that `qinglong db deploy|verify|revert` runs from an install or a checkout.

The reviewable sources of the function changes are db/functions in the repository
(scripts/sync_functions.py writes their deploy, revert and verify scripts here); db/tests holds pgTAP.
"""

from __future__ import annotations

from pathlib import Path

PROJECT = Path(__file__).resolve().parent
"""The sqitch project directory: run `sqitch --chdir PROJECT ...` (or with cwd=PROJECT)."""

__all__ = ["PROJECT", "sqitch"]


def sqitch(*args: str) -> list[str]:
    """The argv of `sqitch <args>` run against this project from any working directory."""
    return ["sqitch", "--chdir", str(PROJECT), *args]
