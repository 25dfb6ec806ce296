"""The disk budget (worker/qinglong/worker/disk.py): free space below `min_free_mib` stops the pulls, logged once
each way; the Worker's own usage counts what is under work_dir and the journal's files, bounded; `min_free_mib`
is read from worker.toml with a default and a one-line error. Touches: files under tmp_path, statvfs, the log
records of the "qinglong.worker" logger."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from qinglong.worker import disk
from qinglong.worker.disk import MIB, DiskBudget, usage
from qinglong.worker.run import ConfigError, load
from tests.unit.worker.test_config import GOOD


def test_pulling_stops_below_the_minimum_and_resumes_above_it_each_change_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "qinglong.worker")
    st = os.statvfs(tmp_path)
    free = st.f_bavail * st.f_frsize
    budget = DiskBudget(tmp_path / "runs", tmp_path / "inbox.sqlite", free + 1024 * MIB)
    assert [budget.check(), budget.check()] == [False, False]
    assert budget.low and budget.free_bytes is not None and budget.free_bytes > 0  # measured where runs/ will be
    budget.min_free_bytes = 0
    assert [budget.check(), budget.check()] == [True, True]
    lines = [r.getMessage() for r in caplog.records]
    assert sum('"disk.low"' in line for line in lines) == 1 and sum('"disk.ok"' in line for line in lines) == 1
    low = next(line for line in lines if '"disk.low"' in line)
    assert f'"needed_mib": {round((free + 1024 * MIB) / MIB, 1)}' in low
    assert budget.status() == {"low": False, "free_bytes": budget.free_bytes, "min_free_bytes": 0,
                               "used_bytes": budget.used_bytes}  # fmt: skip


def test_a_work_dir_that_cannot_be_measured_counts_as_low(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(path: object) -> os.statvfs_result:
        raise PermissionError(13, "denied")

    monkeypatch.setattr(os, "statvfs", failing)
    budget = DiskBudget(tmp_path, tmp_path / "inbox.sqlite", 0)
    assert budget.check() is False and budget.free_bytes is None


def test_own_usage_counts_the_files_under_the_paths_bounded_and_follows_no_symlink(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    (runs / "a" / "b").mkdir(parents=True)
    (runs / "a" / "b" / "big").write_bytes(b"x" * MIB)
    (runs / "link").symlink_to("/usr")
    journal = tmp_path / "inbox.sqlite"
    journal.write_bytes(b"j" * 65536)
    counted = usage((runs, journal, tmp_path / "gone"))
    assert MIB + 65536 <= counted < MIB + 65536 + 64 * 1024  # the folders' own blocks, never /usr
    assert usage((runs,), limit=2) < MIB  # the walk stops after `limit` entries: the file is not reached


def test_min_free_mib_has_a_default_and_a_bad_value_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "worker.toml"
    path.write_text(GOOD)
    assert load(path).min_free_bytes == disk.MIN_FREE_MIB * MIB
    path.write_text(GOOD + "min_free_mib = 0\n")
    assert load(path).min_free_bytes == 0
    path.write_text(GOOD + "min_free_mib = -1\n")
    with pytest.raises(ConfigError, match=r"^worker.toml.min_free_mib: outside 0\.\.1073741824$"):
        load(path)
    path.write_text(GOOD + 'min_free_mib = "64"\n')
    with pytest.raises(ConfigError, match=r"^worker.toml.min_free_mib: expected an integer$"):
        load(path)
