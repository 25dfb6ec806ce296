"""The database core: where the sqitch project is, and the argv that runs sqitch on it.

In a checkout the project is the repository's root (sqitch.plan, sqitch.conf, db/deploy, db/revert,
db/verify); an installed wheel carries the same tree as package data under qinglong/db/project/, so
`qinglong db deploy|verify|revert` needs no checkout.
"""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent
_PACKAGED = _HERE / "project"

PROJECT = _PACKAGED if (_PACKAGED / "sqitch.plan").is_file() else _HERE.parents[2]
"""The sqitch project directory (it holds sqitch.plan): run `sqitch --chdir PROJECT ...`."""

SCRIPTS = PROJECT / "db"
"""sqitch's top_dir: deploy/, revert/ and verify/ of every change."""

__all__ = ["PROJECT", "SCRIPTS", "sqitch"]


def sqitch(*args: str) -> list[str]:
    """The argv of `sqitch <args>` run against this project from any working directory."""
    return ["sqitch", "--chdir", str(PROJECT), *args]
