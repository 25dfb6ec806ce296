"""Retention's journal facts and passes (journal.py `files`/`due`/`removed`/`prune`, retention.py) against a real
SQLite journal and real files: which end marks what, when files become due, what a pass removes and keeps, that
pruning keeps the newest records and returns pages to the file system, that a schema-1 journal is converted, and
that a bad retention setting is one line. Touches files under tmp_path only.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from qinglong.wire.offer import OfferOffered, parse_offer_response
from qinglong.worker.controller import LocalProcessController
from qinglong.worker.inbox import Inbox
from qinglong.worker.journal import Journal, State
from qinglong.worker.retention import Retention, Sweeper, remove_tree
from qinglong.worker.run import ConfigError, load
from tests.unit.wire.test_offer import offered

RUN_A = str(uuid.uuid4())
LIVE = str(uuid.uuid4())


def data(offer_id: str, run_id: str = RUN_A) -> dict[str, Any]:
    base = parse_offer_response(offered())
    assert isinstance(base, OfferOffered)
    offer = dataclasses.replace(base, offer=dataclasses.replace(base.offer, offer_id=offer_id, run_id=run_id))
    return Inbox.accepted(offer, "session-1", 0).to_data()


def ended(j: Journal, state: State, *, succeeded: bool = False, run_id: str = RUN_A) -> str:
    offer_id = str(uuid.uuid4())
    record = j.insert(offer_id, "completion_pending", data(offer_id, run_id))
    j.cas(offer_id, record.revision, state=state, data=record.data, succeeded=succeeded)
    return offer_id


@pytest.fixture
def journal(tmp_path: Path) -> Any:
    with Journal.open(tmp_path / "j" / "inbox.sqlite") as j:
        yield j


def test_the_write_that_ends_a_record_marks_its_files(journal: Journal) -> None:
    before = time.time()
    marks = {
        ended(journal, "completed", succeeded=True): "succeeded",
        ended(journal, "completed"): "failed",
        ended(journal, "control_plane_terminal"): "failed",
        ended(journal, "lease_lost_local_execution_stopped"): "failed",
        ended(journal, "lease_lost_local_execution_unverified"): None,  # its process may run: never removed
    }
    for offer_id, files in marks.items():
        record = journal.get(offer_id)
        assert record is not None and record.files == files, record
        assert record.ended_at is not None and record.ended_at >= before
    live = journal.insert(LIVE, "accepted", data(LIVE))
    moved = journal.cas(LIVE, live.revision, state="starting_acknowledged", data=live.data)
    assert (moved.ended_at, moved.files) == (None, None)
    with pytest.raises(ValueError, match="only a completed record"):
        journal.cas(LIVE, moved.revision, state="control_plane_terminal", data=live.data, succeeded=True)
    assert journal.get(LIVE) == moved  # nothing written


def test_resolving_an_unverified_record_marks_its_files_failed(journal: Journal) -> None:
    offer_id = ended(journal, "lease_lost_local_execution_unverified")
    record = journal.get(offer_id)
    assert record is not None
    resolved = journal.resolve(offer_id, record.revision, state="lease_lost_local_execution_stopped", data=record.data)
    assert resolved.files == "failed"


def test_due_follows_each_mark_s_time_and_removed_is_final(journal: Journal) -> None:
    ok, bad, held = (
        ended(journal, "completed", succeeded=True),
        ended(journal, "completed"),
        ended(journal, "lease_lost_local_execution_unverified"),
    )
    now = time.time() + 1
    assert {r.offer_id for r in journal.due(now, 0, 16)} == {ok}
    assert {r.offer_id for r in journal.due(0, now, 16)} == {bad}
    assert {r.offer_id for r in journal.due(now, now, 16)} == {ok, bad}  # never `held`
    journal.removed(ok)
    journal.removed(ok)  # idempotent
    assert [r.offer_id for r in journal.due(now, now, 16)] == [bad]
    assert journal.get(ok) is not None and journal.get(ok).files == "removed"  # type: ignore[union-attr]
    journal.removed(held)  # not due: stays as it is
    assert journal.get(held).files is None  # type: ignore[union-attr]


def test_prune_deletes_only_removed_old_records_and_keeps_the_newest(journal: Journal, tmp_path: Path) -> None:
    ids = [ended(journal, "completed", succeeded=True) for _ in range(6)]
    live = journal.insert(LIVE, "accepted", data(LIVE))
    for offer_id in ids[:5]:
        journal.removed(offer_id)
    assert journal.prune(time.time() - 3600, 0) == 0  # none ended an hour ago
    assert journal.prune(time.time() + 1, 3) == 4  # the newest 3 stay, and ids[5] (its files not removed)
    assert [r.offer_id for r in journal.page(None, 64)] == [ids[4], ids[5], live.offer_id]
    conn = sqlite3.connect(journal.path)
    try:
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
        assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
    finally:
        conn.close()


def test_a_schema_1_journal_is_converted_and_its_ended_records_are_kept_as_failed(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(
        "CREATE TABLE inbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, offer_id TEXT NOT NULL UNIQUE, revision INTEGER"
        " NOT NULL, state TEXT NOT NULL, data TEXT NOT NULL, updated_at REAL NOT NULL)"
    )
    insert = "INSERT INTO inbox (offer_id, revision, state, data, updated_at) VALUES (?, ?, ?, '{}', ?)"
    conn.execute(insert, ("a", 2, "completed", 5))
    conn.execute(insert, ("b", 1, "started", 6))
    conn.execute("PRAGMA user_version = 1")
    conn.close()
    path.chmod(0o600)
    with Journal.open(path) as j:
        a, b = j.get("a"), j.get("b")
        assert a is not None and (a.ended_at, a.files) == (5.0, "failed")
        assert b is not None and (b.ended_at, b.files) == (None, None)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
    conn.close()


def files_of(work: Path, offer_id: str, run_id: str = RUN_A) -> tuple[Path, Path]:
    launch, run_dir = work / offer_id, work / "tasks" / run_id
    launch.mkdir(parents=True, exist_ok=True)
    (launch / "n.log").write_text("out")
    (run_dir / "locked").mkdir(parents=True, exist_ok=True)
    (run_dir / "locked" / "f").write_text("x")
    (run_dir / "locked").chmod(0o500)  # a folder the task made unwritable
    return launch, run_dir


def test_a_pass_removes_due_files_keeps_a_shared_run_directory_and_failed_files_for_their_time(
    journal: Journal, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    sweeper = Sweeper(journal, work, LocalProcessController(), Retention(keep_failed_files_s=3600))
    failed = ended(journal, "completed")
    ok = ended(journal, "completed", succeeded=True)
    failed_launch, run_dir = files_of(work, failed)
    ok_launch, _ = files_of(work, ok)
    assert sweeper.sweep() == 1
    assert not ok_launch.exists(), "an acknowledged success kept its launch folder"
    assert failed_launch.exists() and (run_dir / "locked" / "f").exists(), "a failed Attempt's files went early"
    assert journal.get(ok).files == "removed" and journal.get(failed).files == "failed"  # type: ignore[union-attr]
    assert sweeper.sweep() == 0  # nothing more is due
    later = Sweeper(journal, work, LocalProcessController(), Retention(keep_failed_files_s=0))
    assert later.sweep() == 1
    assert not failed_launch.exists() and not run_dir.exists()
    assert work.exists() and (work / "tasks").exists()


def test_a_pass_finishes_what_a_killed_one_began(journal: Journal, tmp_path: Path) -> None:
    work = tmp_path / "work"
    ok = ended(journal, "completed", succeeded=True)
    launch, run_dir = files_of(work, ok)
    remove_tree(launch)  # as a pass killed after step "launch_removed" left it
    remove_tree(launch)  # missing is fine
    assert Sweeper(journal, work, LocalProcessController(), Retention()).sweep() == 1
    assert not run_dir.exists() and journal.get(ok).files == "removed"  # type: ignore[union-attr]


def test_a_live_record_never_loses_its_files(journal: Journal, tmp_path: Path) -> None:
    work = tmp_path / "work"
    live = journal.insert(LIVE, "completion_pending", data(LIVE))
    launch, run_dir = files_of(work, live.offer_id)
    unverified = ended(journal, "lease_lost_local_execution_unverified")
    held, _ = files_of(work, unverified)
    Sweeper(journal, work, LocalProcessController(), Retention(keep_failed_files_s=0)).sweep()
    assert launch.exists() and run_dir.exists() and held.exists()


def config_with(tmp_path: Path, line: str) -> Path:
    config = tmp_path / "worker.toml"
    config.write_text(
        "\n".join(
            (
                'origin = "https://c:1"', f'worker_id = "{uuid.uuid4()}"', "generation = 1", 'certificate = "c"',
                'key = "k"', 'trust_anchors = "t"', 'journal = "j"', 'work_dir = "w"',
                "require_signed_plans = false", line, "",
            )
        )
    )  # fmt: skip
    return config


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("keep_files_seconds = -1", "keep_files_seconds: outside"),
        ('journal_keep_records = "x"', "journal_keep_records"),
        ("keep_failed_files_seconds = true", "keep_failed_files_seconds"),
    ],
)
def test_a_bad_retention_setting_is_one_line(tmp_path: Path, line: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(config_with(tmp_path, line))
    assert expected in str(caught.value) and "\n" not in str(caught.value)


def test_retention_settings_and_their_defaults(tmp_path: Path) -> None:
    assert load(config_with(tmp_path, "")).retention == Retention(0.0, 86400.0, 259200.0, 100)
    given = load(config_with(tmp_path, "keep_files_seconds = 60\njournal_keep_records = 5")).retention
    assert given == Retention(keep_files_s=60.0, journal_keep_records=5)
