"""The inbox journal against real files, a real flock and real SQLite. Touches files under tmp_path
and starts short-lived Python child processes (one is SIGKILLed on purpose).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qinglong.worker.journal import (
    MAX_DATA_BYTES,
    STATES,
    TERMINAL_STATES,
    DuplicateOffer,
    Journal,
    JournalBusy,
    JournalError,
    Record,
    RevisionConflict,
    State,
)

# The transition table exactly as the brief states it, written out independently of the module.
LEASE_LOST: set[State] = {"lease_lost_local_execution_stopped", "lease_lost_local_execution_unverified"}
EXITS: set[State] = {"recovery_required", "control_plane_terminal", *LEASE_LOST}
SPEC: dict[State, set[State]] = {
    "accepted": {"starting_acknowledged", "start_failed", "completed", *EXITS},
    "starting_acknowledged": {"launching", "start_failed", "completed", *EXITS},
    "launching": {"started", "start_failed", *EXITS},
    "started": {"running_acknowledged", "completion_pending", *EXITS},
    "running_acknowledged": {"completion_pending", *EXITS},
    "completion_pending": {"completed", *EXITS},
    "start_failed": {"completed", "control_plane_terminal", "recovery_required"},
    "recovery_required": set(),
}
TERMINAL: set[State] = {"completed", "control_plane_terminal", *LEASE_LOST}
PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
IDS = itertools.count()


def legal(before: State, after: State) -> bool:
    return before not in TERMINAL and (after == before or after in SPEC[before])


def child(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=15)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "inbox.sqlite3"


@pytest.fixture
def journal(path: Path) -> Iterator[Journal]:
    with Journal.open(path) as j:
        yield j


def conn_of(j: Journal) -> sqlite3.Connection:
    conn = j._conn
    assert conn is not None
    return conn


def snapshot(j: Journal) -> list[tuple[Any, ...]]:
    return conn_of(j).execute("SELECT * FROM inbox ORDER BY seq").fetchall()


# ---------------------------------------------------------------- records


def test_insert_get_cas_round_trip(journal: Journal) -> None:
    assert journal.get("o-1") is None
    data = {"offer": {"leaseToken": "secret", "n": [1, 2.5, None, True]}, "z": "é"}
    inserted = journal.insert("o-1", "accepted", data)
    assert (inserted.offer_id, inserted.seq, inserted.revision, inserted.state) == ("o-1", 1, 1, "accepted")
    assert inserted.data == data and journal.get("o-1") == inserted
    moved = journal.cas("o-1", 1, state="starting_acknowledged", data={"step": 2})
    assert (moved.seq, moved.revision, moved.state, dict(moved.data)) == (1, 2, "starting_acknowledged", {"step": 2})
    same = journal.cas("o-1", 2, state="starting_acknowledged", data={"step": 3})
    assert (same.revision, same.state, same.data) == (3, "starting_acknowledged", {"step": 3})
    assert journal.get("o-1") == same
    with pytest.raises(TypeError):
        same.data["step"] = 4  # type: ignore[index]
    assert "secret" not in repr(inserted) and "secret" not in repr(journal.get("o-1"))


def test_data_is_stored_canonically(journal: Journal) -> None:
    journal.insert("o", "accepted", {"b": [1, {"y": 1, "x": 2}], "a": ("t", 1)})
    assert snapshot(journal)[0][4] == '{"a":["t",1],"b":[1,{"x":2,"y":1}]}'


def test_stale_cas_conflicts_and_changes_nothing(journal: Journal) -> None:
    journal.insert("o", "accepted", {"v": 1})
    current = journal.cas("o", 1, state="starting_acknowledged", data={"v": 2})
    before = snapshot(journal)
    for stale in (1, 3, 0):
        with pytest.raises(RevisionConflict) as caught:
            journal.cas("o", stale, state="launching", data={"v": 3})
        assert caught.value.current == current
    with pytest.raises(RevisionConflict) as missing:
        journal.cas("nobody", 1, state="launching", data={})
    assert missing.value.current is None
    assert snapshot(journal) == before


def test_duplicate_offer(journal: Journal) -> None:
    first = journal.insert("o", "accepted", {"leaseToken": "secret"})
    before = snapshot(journal)
    with pytest.raises(DuplicateOffer) as caught:
        journal.insert("o", "started", {"other": True})
    assert caught.value.existing == first and "secret" not in str(caught.value)
    assert snapshot(journal) == before


@pytest.mark.parametrize("bad", ["", 7, None, "x" * 257])
def test_offer_id_must_be_a_short_non_empty_str(journal: Journal, bad: Any) -> None:
    with pytest.raises(ValueError, match="offer_id"):
        journal.insert(bad, "accepted", {})
    assert journal.count() == 0


def test_unknown_state_refused(journal: Journal) -> None:
    with pytest.raises(ValueError, match="unknown journal state"):
        journal.insert("o", "bogus", {})  # type: ignore[arg-type]
    journal.insert("o", "accepted", {})
    with pytest.raises(ValueError, match="unknown journal state"):
        journal.cas("o", 1, state="bogus", data={})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown journal state"):
        journal.count(states=["bogus"])  # type: ignore[list-item]
    assert journal.get("o") is not None and journal.get("o").revision == 1  # type: ignore[union-attr]


# ---------------------------------------------------------------- transitions


def test_constants_match_the_brief() -> None:
    assert set(STATES) == set(SPEC) | TERMINAL and len(STATES) == 12
    assert TERMINAL_STATES == TERMINAL


def test_every_transition_pair_follows_the_table(journal: Journal) -> None:
    for before, after in itertools.product(STATES, STATES):
        offer = f"{before}->{after}"
        journal.insert(offer, before, {"before": True})
        if legal(before, after):
            moved = journal.cas(offer, 1, state=after, data={"after": True})
            assert (moved.revision, moved.state, moved.data) == (2, after, {"after": True})
        else:
            with pytest.raises(JournalError) as caught:
                journal.cas(offer, 1, state=after, data={"after": True})
            assert not isinstance(caught.value, RevisionConflict)
            unchanged = journal.get(offer)
            assert unchanged is not None
            assert (unchanged.revision, unchanged.state, unchanged.data) == (1, before, {"before": True})
    assert journal.count() == len(STATES) ** 2


@pytest.mark.parametrize("terminal", sorted(TERMINAL))
def test_terminal_states_are_frozen(journal: Journal, terminal: State) -> None:
    record = journal.insert("o", "completion_pending", {})
    if terminal != "completed":
        record = journal.cas("o", 1, state=terminal, data={"final": 1})
    else:
        record = journal.cas("o", 1, state="completed", data={"final": 1})
    for target in STATES:
        with pytest.raises(JournalError, match="illegal transition"):
            journal.cas("o", record.revision, state=target, data={"final": 2})
    assert journal.get("o") == record


def test_recovery_required_never_leaves(journal: Journal) -> None:
    record = journal.insert("o", "started", {})
    record = journal.cas("o", 1, state="recovery_required", data={"why": "unverified pid"})
    for target in STATES:
        if target != "recovery_required":
            with pytest.raises(JournalError, match="illegal transition"):
                journal.cas("o", record.revision, state=target, data={})
    assert journal.get("o") == record


# The operator's one move (`resolve`), written out independently of the module.
RESOLVABLE: set[State] = {"recovery_required", "lease_lost_local_execution_unverified"}
RESOLVED: State = "lease_lost_local_execution_stopped"


def test_resolve_moves_only_an_isolated_record_to_stopped(journal: Journal) -> None:
    for before, after in itertools.product(STATES, STATES):
        offer = f"{before}->{after}"
        journal.insert(offer, before, {"before": True})
        if before in RESOLVABLE and after == RESOLVED:
            moved = journal.resolve(offer, 1, state=after, data={"after": True})
            assert (moved.revision, moved.state, moved.data) == (2, after, {"after": True})
            assert journal.get(offer) == moved
        else:
            rows = snapshot(journal)
            with pytest.raises(JournalError, match="cannot resolve") as caught:
                journal.resolve(offer, 1, state=after, data={"after": True})
            assert not isinstance(caught.value, RevisionConflict)
            assert snapshot(journal) == rows
    assert journal.count(states=[RESOLVED]) == len(STATES) + len(RESOLVABLE)  # inserted so, or resolved


def test_resolve_is_a_compare_and_set(journal: Journal) -> None:
    record = journal.insert("o", "started", {})
    record = journal.cas("o", 1, state="recovery_required", data={"why": "x"})
    rows = snapshot(journal)
    for offer, revision in (("o", 1), ("o", 3), ("missing", 1)):
        with pytest.raises(RevisionConflict):
            journal.resolve(offer, revision, state=RESOLVED, data={})
    with pytest.raises(TypeError):
        journal.resolve("o", record.revision, state=RESOLVED, data={"bad": object()})
    assert snapshot(journal) == rows
    resolved = journal.resolve("o", record.revision, state=RESOLVED, data={"why": "x", "resolved": {"by": "op"}})
    assert (resolved.revision, resolved.state) == (3, RESOLVED)
    with pytest.raises(JournalError, match="cannot resolve"):  # settled once: terminal for resolve too
        journal.resolve("o", resolved.revision, state=RESOLVED, data={})
    with pytest.raises(JournalError, match="illegal transition"):  # and for cas
        journal.cas("o", resolved.revision, state="recovery_required", data={})
    assert journal.get("o") == resolved


def test_random_transition_sequences_never_reach_an_illegal_state(tmp_path: Path) -> None:
    with Journal.open(tmp_path / "inbox.sqlite3") as j:

        @PROPS
        @given(start=st.sampled_from(STATES), steps=st.lists(st.sampled_from(STATES), max_size=12))
        def run(start: State, steps: list[State]) -> None:
            offer = f"offer-{next(IDS)}"
            record = j.insert(offer, start, {"step": 0})
            for number, target in enumerate(steps, 1):
                if legal(record.state, target):
                    moved = j.cas(offer, record.revision, state=target, data={"step": number})
                    assert (moved.revision, moved.state) == (record.revision + 1, target)
                    assert moved.seq == record.seq
                    record = moved
                else:
                    with pytest.raises(JournalError):
                        j.cas(offer, record.revision, state=target, data={"step": number})
                assert j.get(offer) == record
            assert record.state in STATES

        run()


# ---------------------------------------------------------------- paging and counting


def test_page_returns_each_record_once_in_insertion_order(journal: Journal) -> None:
    ids = [f"o-{i:03}" for i in range(100)]
    for offer in ids:
        journal.insert(offer, "accepted", {})
    seen: list[Record] = []
    cursor: int | None = None
    while page := journal.page(cursor, 16):
        assert len(page) <= 16
        seen += page
        cursor = page[-1].seq
    assert [r.offer_id for r in seen] == ids
    assert [r.seq for r in seen] == sorted({r.seq for r in seen})


def test_inserts_between_pages_appear_after_the_cursor(journal: Journal) -> None:
    for i in range(40):
        journal.insert(f"old-{i}", "accepted", {})
    seen: list[str] = []
    cursor: int | None = None
    added = 0
    while page := journal.page(cursor, 16):
        seen += [r.offer_id for r in page]
        cursor = page[-1].seq
        journal.cas(page[0].offer_id, 1, state="starting_acknowledged", data={})  # updates keep their seq
        if added < 30:
            for _ in range(10):
                journal.insert(f"new-{added}", "accepted", {})
                added += 1
    expected = [f"old-{i}" for i in range(40)] + [f"new-{i}" for i in range(30)]
    assert seen == expected and len(set(seen)) == len(seen)


@pytest.mark.parametrize("limit", [0, -1, 65, 1000, True, 1.5, "16"])
def test_page_limit_bounds(journal: Journal, limit: Any) -> None:
    with pytest.raises(ValueError):
        journal.page(None, limit)


def test_page_limits_one_and_sixty_four(journal: Journal) -> None:
    for i in range(70):
        journal.insert(f"o-{i}", "accepted", {})
    assert [r.offer_id for r in journal.page(None, 1)] == ["o-0"]
    assert len(journal.page(None, 64)) == 64 and len(journal.page(64, 64)) == 6
    assert journal.page(70, 64) == []


def test_count_by_states(journal: Journal) -> None:
    journal.insert("a", "accepted", {})
    journal.insert("b", "accepted", {})
    journal.insert("c", "recovery_required", {})
    assert journal.count() == 3
    assert journal.count(states=["accepted"]) == 2
    assert journal.count(states={"accepted", "recovery_required"}) == 3
    assert journal.count(states=[]) == 0 and journal.count(states=["completed"]) == 0


# ---------------------------------------------------------------- data checks


@pytest.mark.parametrize(
    "bad",
    [[1, 2], "text", None, 42, {"a": object()}, {"a": math.nan}, {"a": math.inf}, {1: "x"},
     {"a": {2: 3}}, {"a": b"bytes"}, {"a": {1, 2}}, {"a": "\ud800"}],
)  # fmt: skip
def test_data_that_is_not_a_json_object_is_refused(journal: Journal, bad: Any) -> None:
    with pytest.raises(TypeError):
        journal.insert("o", "accepted", bad)
    assert journal.count() == 0 and journal.get("o") is None
    journal.insert("o", "accepted", {"ok": 1})
    with pytest.raises(TypeError):
        journal.cas("o", 1, state="starting_acknowledged", data=bad)
    record = journal.get("o")
    assert record is not None and (record.revision, record.state, record.data) == (1, "accepted", {"ok": 1})


def test_record_size_cap(journal: Journal) -> None:
    overhead = len('{"k":""}')
    at_cap = {"k": "x" * (MAX_DATA_BYTES - overhead)}
    assert journal.insert("fits", "accepted", at_cap).data == at_cap
    with pytest.raises(JournalError, match="cap"):
        journal.insert("over", "accepted", {"k": "x" * (MAX_DATA_BYTES - overhead + 1)})
    with pytest.raises(JournalError, match="cap"):  # counted in UTF-8 bytes, not characters
        journal.insert("wide", "accepted", {"k": "é" * ((MAX_DATA_BYTES - overhead) // 2 + 1)})
    with pytest.raises(JournalError, match="cap"):
        journal.cas("fits", 1, state="starting_acknowledged", data={"k": "y" * MAX_DATA_BYTES})
    assert journal.count() == 1 and journal.get("fits") is not None
    assert journal.get("fits").revision == 1  # type: ignore[union-attr]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=16,
)


def test_any_json_object_round_trips_exactly(tmp_path: Path) -> None:
    with Journal.open(tmp_path / "inbox.sqlite3") as j:

        @PROPS
        @given(data=st.dictionaries(st.text(max_size=8), json_values, max_size=6))
        def run(data: dict[str, Any]) -> None:
            offer = f"offer-{next(IDS)}"
            assert j.insert(offer, "accepted", data).data == data
            assert j.get(offer) == j.page(j.get(offer).seq - 1, 1)[0]  # type: ignore[union-attr]
            stored = conn_of(j).execute("SELECT data FROM inbox WHERE offer_id = ?", (offer,)).fetchone()[0]
            assert stored == json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

        run()


# ---------------------------------------------------------------- files, modes and SQLite settings


def test_modes_are_private_whatever_the_umask(path: Path) -> None:
    old = os.umask(0)
    try:
        with Journal.open(path) as j:
            j.insert("o", "accepted", {})
            mode = {p.name: stat.S_IMODE(p.stat().st_mode) for p in path.parent.iterdir()}
            assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
            assert mode == {
                "inbox.sqlite3": 0o600, "inbox.lock": 0o600, "inbox.sqlite3-wal": 0o600, "inbox.sqlite3-shm": 0o600,
            }  # fmt: skip
    finally:
        os.umask(old)


def test_a_loose_existing_lock_file_is_tightened(path: Path) -> None:
    path.parent.mkdir(mode=0o700)
    lock = path.with_suffix(".lock")
    lock.touch()
    lock.chmod(0o644)
    with Journal.open(path):
        assert stat.S_IMODE(lock.stat().st_mode) == 0o600


def test_pragmas_on_the_connection(journal: Journal) -> None:
    conn = conn_of(journal)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] > 0


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o620])
def test_a_file_open_to_group_or_others_is_refused(path: Path, mode: int) -> None:
    with Journal.open(path) as j:
        j.insert("o", "accepted", {})
    path.chmod(mode)
    with pytest.raises(JournalError, match="0600") as caught:
        Journal.open(path)
    assert not isinstance(caught.value, JournalBusy)
    path.chmod(0o600)
    with Journal.open(path) as j:  # the refusal released the lock and changed nothing
        assert j.count() == 1


def test_a_loose_wal_file_or_a_symlink_is_refused(path: Path, tmp_path: Path) -> None:
    Journal.open(path).close()
    wal = path.with_name(path.name + "-wal")
    wal.touch()
    wal.chmod(0o644)
    with pytest.raises(JournalError, match="0600"):
        Journal.open(path)
    wal.unlink()
    link = path.with_name("link.sqlite3")
    link.symlink_to(path)
    with pytest.raises(JournalError, match="regular file"):
        Journal.open(link)


def test_close_is_idempotent_and_a_closed_journal_refuses(path: Path) -> None:
    j = Journal.open(path)
    j.insert("o", "accepted", {})
    j.close()
    j.close()
    for call in (lambda: j.get("o"), lambda: j.count(), lambda: j.page(None, 1), lambda: j.insert("p", "accepted", {})):
        with pytest.raises(JournalError, match="closed"):
            call()


# ---------------------------------------------------------------- ownership across processes

TRY_OPEN = """
import sys
from pathlib import Path
from qinglong.worker.journal import Journal, JournalBusy
try:
    with Journal.open(Path(sys.argv[1])) as j:
        print(j.count())
except JournalBusy:
    sys.exit(3)
"""

WRITE_FOREVER = """
import itertools, sys
from pathlib import Path
from qinglong.worker.journal import Journal
j = Journal.open(Path(sys.argv[1]))
for i in itertools.count():
    j.insert(f"offer-{i}", "accepted", {"i": i, "leaseToken": "t" * 64})
    print(i, flush=True)
"""


def test_a_second_owner_in_another_process_is_busy_until_close(path: Path) -> None:
    j = Journal.open(path)
    j.insert("o", "accepted", {})
    with pytest.raises(JournalBusy):
        Journal.open(path)  # a second open in this process is refused too (flock is per open file)
    assert child(TRY_OPEN, str(path)).returncode == 3
    j.close()
    done = child(TRY_OPEN, str(path))
    assert (done.returncode, done.stdout.strip()) == (0, "1"), done.stderr


def test_a_sigkilled_owner_releases_the_lock_and_keeps_every_committed_record(path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITE_FOREVER, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if int(line) >= 49:
                break
        assert child(TRY_OPEN, str(path)).returncode == 3  # alive: it owns the journal
        os.kill(proc.pid, signal.SIGKILL)
        rest, _ = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    last = max([49, *map(int, rest.split())])
    with Journal.open(path) as j:  # no JournalBusy: the kernel dropped the dead owner's flock
        total = j.count()
        assert last + 1 <= total <= last + 2  # every reported commit, plus at most one unreported
        for i in range(total):
            record = j.get(f"offer-{i}")
            assert record is not None and record.data["i"] == i and record.seq == i + 1


# ---------------------------------------------------------------- threads


def test_concurrent_cas_on_one_record_has_exactly_one_winner(journal: Journal) -> None:
    for round_ in range(20):
        offer = f"o-{round_}"
        journal.insert(offer, "accepted", {})
        barrier = threading.Barrier(2)
        outcomes: list[Record | BaseException] = []

        def contend(
            who: int, offer: str = offer, barrier: threading.Barrier = barrier, outcomes: list[Any] = outcomes
        ) -> None:
            barrier.wait()
            try:
                outcomes.append(journal.cas(offer, 1, state="starting_acknowledged", data={"who": who}))
            except RevisionConflict as e:
                outcomes.append(e)

        threads = [threading.Thread(target=contend, args=(who,)) for who in (1, 2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=10)
        wins = [o for o in outcomes if isinstance(o, Record)]
        losses = [o for o in outcomes if isinstance(o, RevisionConflict)]
        assert len(wins) == 1 and len(losses) == 1
        assert losses[0].current == wins[0] == journal.get(offer)
        assert wins[0].revision == 2
