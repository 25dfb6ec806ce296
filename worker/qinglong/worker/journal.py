"""The Worker's inbox journal, a record per offer. Touches the journal file, its WAL and its lock file.

SQLite, WAL, `synchronous=FULL` (both verified by PRAGMA): every write is its own `BEGIN IMMEDIATE …
COMMIT`, durable when the call returns. One owner at a time: an exclusive non-blocking `flock` on
`path.with_suffix(".lock")` (JournalBusy otherwise, from any process; the kernel drops it when the
owner dies). The journal holds lease tokens: folder created 0700, files 0600; `open` refuses a journal,
WAL or SHM file that is not a regular file or grants group/others any permission. Nothing happens at
import or construction: `Journal.open` is the only thing that touches the disk. Thread-safe (a mutex).

Beside the records, a `meta` table holds Worker-level values (`meta`/`set_meta`), such as the id of
a pull that was sent but not yet answered.

`seq` is the insertion order (the keyset cursor of `page`); `revision` is 1 on insert, +1 per `cas`.
`data` is the caller's JSON object, checked before anything is written (TypeError unless made of
str-keyed mappings, lists/tuples, str, int, bool, None, finite floats, nesting ≤ 64), stored
canonically (sorted keys, no spaces), ≤ 256 KiB. No message or repr includes `data`.

`insert` takes any state. `cas` moves (exits = recovery_required | control_plane_terminal | both
lease_lost_* states); every non-terminal state may also move to itself (a data-only update, still a
new revision); anything else raises JournalError and writes nothing:
    accepted              → starting_acknowledged | start_failed | completed | exits
    starting_acknowledged → launching | start_failed | completed | exits
    launching             → started | start_failed | exits
    started               → running_acknowledged | completion_pending | exits
    running_acknowledged  → completion_pending | exits
    completion_pending    → completed | exits
    start_failed          → completed | recovery_required | control_plane_terminal
    recovery_required     → (itself only: an operator settles it with `resolve`, never `cas`)
    completed, control_plane_terminal, lease_lost_* → nothing, not even themselves (terminal)
`resolve` is the operator's one move, never the Worker's (`qinglong-worker journal resolve`, after
making sure no process of the offer runs), with its own rule and nothing else:
    recovery_required | lease_lost_local_execution_unverified → lease_lost_local_execution_stopped

Retention (retention.py decides when; the journal keeps the facts it decides on). The write that moves a record
into a terminal state also sets, in the same transaction, `ended_at` and `files`: `succeeded` (`cas` with
`succeeded=True`, into `completed` only), else `failed`; lease_lost_local_execution_unverified leaves `files`
NULL: no process may be proven gone, so nothing of it is ever removed (`resolve` marks it `failed` then). A record
not ended has `files` NULL too. `due` lists the records whose files may go, `removed` marks them gone, and
`prune` deletes only `removed` records that ended before a time, never the newest N, then returns the freed
pages to the file system (`auto_vacuum = INCREMENTAL`; `open` converts an older journal once, with VACUUM).
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Literal, get_args

State = Literal[
    "accepted", "starting_acknowledged", "launching", "started", "running_acknowledged",
    "completion_pending", "completed", "start_failed", "recovery_required",
    "control_plane_terminal", "lease_lost_local_execution_stopped",
    "lease_lost_local_execution_unverified",
]  # fmt: skip
STATES: Final[tuple[State, ...]] = get_args(State)
LEASE_LOST: Final[frozenset[State]] = frozenset(
    {"lease_lost_local_execution_stopped", "lease_lost_local_execution_unverified"}
)
TERMINAL_STATES: Final[frozenset[State]] = LEASE_LOST | {"completed", "control_plane_terminal"}
MAX_DATA_BYTES: Final = 256 * 1024
MAX_OFFER_ID_LENGTH: Final = 256
MAX_DEPTH: Final = 64
PAGE_LIMIT_MAX: Final = 64
BUSY_TIMEOUT_MS: Final = 5000
SCHEMA_VERSION: Final = 2

_EXITS: Final[frozenset[State]] = LEASE_LOST | {"recovery_required", "control_plane_terminal"}
_MOVES: Final[Mapping[State, frozenset[State]]] = {  # and every non-terminal state → itself
    # → completed before a spawn: a starting ACK answered not_started (a cancel intent ended the Attempt)
    "accepted": _EXITS | {"starting_acknowledged", "start_failed", "completed"},
    "starting_acknowledged": _EXITS | {"launching", "start_failed", "completed"},
    "launching": _EXITS | {"started", "start_failed"},
    "started": _EXITS | {"running_acknowledged", "completion_pending"},
    "running_acknowledged": _EXITS | {"completion_pending"},
    "completion_pending": _EXITS | {"completed"},
    "start_failed": frozenset({"completed", "control_plane_terminal", "recovery_required"}),
}
_RESOLVABLE: Final[frozenset[State]] = frozenset({"recovery_required", "lease_lost_local_execution_unverified"})
_RESOLVED: Final[State] = "lease_lost_local_execution_stopped"
Files = Literal["succeeded", "failed", "removed"]
_FILES_CHECK: Final = "files IS NULL OR files IN ('succeeded', 'failed', 'removed')"
_SCHEMA: Final = f"""CREATE TABLE IF NOT EXISTS inbox (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    offer_id   TEXT    NOT NULL UNIQUE,
    revision   INTEGER NOT NULL CHECK (revision >= 1),
    state      TEXT    NOT NULL CHECK (state IN ({", ".join(f"'{s}'" for s in STATES)})),
    data       TEXT    NOT NULL,
    updated_at REAL    NOT NULL,
    ended_at   REAL,
    files      TEXT    CHECK ({_FILES_CHECK}))"""
# Schema 1 → 2: the retention columns; records that ended before them keep their files as failed ones do.
_TO_2: Final = (
    "ALTER TABLE inbox ADD COLUMN ended_at REAL",
    f"ALTER TABLE inbox ADD COLUMN files TEXT CHECK ({_FILES_CHECK})",
    "UPDATE inbox SET ended_at = updated_at, files = 'failed' WHERE state IN ('completed', 'control_plane_terminal',"
    " 'lease_lost_local_execution_stopped')",
)
_META_SCHEMA: Final = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
_SELECT: Final = "SELECT offer_id, seq, revision, state, data, updated_at, ended_at, files FROM inbox"


class JournalError(Exception):
    """Base of every journal failure (also: illegal transition, size cap, unsafe file, closed)."""


class JournalBusy(JournalError):
    """Another owner holds the journal's flock."""


class RevisionConflict(JournalError):
    """A compare-and-set lost; `current` is the record stored now (None: no such offer)."""

    def __init__(self, offer_id: str, expected_revision: int, current: Record | None) -> None:
        found = "no record" if current is None else f"revision {current.revision}"
        super().__init__(f"offer {offer_id!r}: expected revision {expected_revision}, found {found}")
        self.current = current


class DuplicateOffer(JournalError):
    """An insert of an offer id already journaled; `existing` is the stored record."""

    def __init__(self, existing: Record) -> None:
        super().__init__(f"offer {existing.offer_id!r} is already journaled")
        self.existing = existing


@dataclass(frozen=True)
class Record:
    offer_id: str
    seq: int
    revision: int
    state: State
    data: Mapping[str, Any] = field(repr=False, hash=False)
    updated_at: float
    ended_at: float | None = None  # when it entered a terminal state
    files: Files | None = None  # what retention may do with its files (the module docstring)


def _state(state: object) -> State:
    if state not in STATES:
        raise ValueError(f"unknown journal state {state!r}")
    return state


def _plain(value: object, depth: int = 1) -> object:
    """`value` as plain JSON values (dict/list); TypeError for anything JSON cannot hold exactly."""
    if depth > MAX_DEPTH:
        raise TypeError(f"data nests deeper than {MAX_DEPTH}")
    if isinstance(value, float) and not math.isfinite(value):
        raise TypeError("data holds a non-finite float, which JSON cannot represent")
    if value is None or isinstance(value, str | int | float):  # bool is an int
        return value
    if isinstance(value, list | tuple):
        return [_plain(item, depth + 1) for item in value]
    if isinstance(value, Mapping):
        if not all(isinstance(key, str) for key in value):
            raise TypeError("data holds a mapping with a non-str key; JSON keys are strings")
        return {key: _plain(item, depth + 1) for key, item in value.items()}
    raise TypeError(f"data holds a {type(value).__name__}, which is not JSON")


def _encode(data: Mapping[str, Any]) -> str:
    if not isinstance(data, Mapping):
        raise TypeError(f"data must be a JSON object (a mapping), not {type(data).__name__}")
    text = json.dumps(_plain(data), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise TypeError("data holds a string that is not valid Unicode (a lone surrogate)") from e
    if size > MAX_DATA_BYTES:
        raise JournalError(f"data is {size} bytes, over the {MAX_DATA_BYTES}-byte record cap")
    return text


def _in_states(states: Collection[State] | None) -> tuple[str, list[str]]:
    """` AND state IN (?, …)` and its parameters (nothing for None); the states are checked."""
    if states is None:
        return "", []
    wanted = sorted({_state(s) for s in states})
    return f" AND state IN ({', '.join('?' * len(wanted))})", list(wanted)


def _record(row: tuple[Any, ...]) -> Record:
    offer_id, seq, revision, state, data, updated_at, ended_at, files = row
    return Record(offer_id, seq, revision, state, MappingProxyType(json.loads(data)), updated_at, ended_at, files)


def _private_file(path: Path, create: bool) -> None:
    """Refuse a non-regular or group/other-accessible file; create a missing one 0600 if `create`."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if create:
            for target, flags in ((path, os.O_RDWR | os.O_CREAT | os.O_EXCL), (path.parent, os.O_DIRECTORY)):
                fd = os.open(target, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                try:
                    os.fchmod(fd, 0o600) if target is path else None
                    os.fsync(fd)  # the new file, then its directory entry
                finally:
                    os.close(fd)
        return
    if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o077:
        raise JournalError(f"{path} must be a regular file of mode 0600 (is {stat.filemode(st.st_mode)})")


def _file_identity(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


class Journal:
    """An open journal this process owns exclusively. Build it with `Journal.open`."""

    def __init__(self, path: Path, conn: sqlite3.Connection, lock_fd: int) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = conn
        self._lock_fd = lock_fd
        self._mutex = threading.Lock()
        self._identity = _file_identity(path)

    def replaced(self) -> bool:
        """The journal or its lock file was deleted or replaced under this owner (file identity): its
        writes no longer reach what a restart would read, and another owner could lock a new file."""
        try:
            lock = os.fstat(self._lock_fd)
            return _file_identity(self.path) != self._identity or _file_identity(self.path.with_suffix(".lock")) != (
                lock.st_dev,
                lock.st_ino,
            )
        except OSError:
            return True

    @classmethod
    def open(cls, path: Path) -> Journal:
        path = Path(path)
        lock_path = path.with_suffix(".lock")
        if lock_path == path:
            raise JournalError(f"{path} would be its own lock file")
        try:
            if not path.parent.exists():
                path.parent.mkdir(mode=0o700, parents=True)
                path.parent.chmod(0o700)
            lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as e:
            raise JournalError(f"cannot open the lock file {lock_path}: {e}") from e
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BaseException as e:
            os.close(lock_fd)
            if isinstance(e, BlockingIOError):
                raise JournalBusy(f"{path} has another owner ({lock_path} is locked)") from None
            raise
        conn: sqlite3.Connection | None = None
        try:
            if stat.S_IMODE(os.fstat(lock_fd).st_mode) != 0o600:
                os.fchmod(lock_fd, 0o600)
            _private_file(path.with_name(path.name + "-wal"), create=False)
            _private_file(path.with_name(path.name + "-shm"), create=False)
            _private_file(path, create=True)
            conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            conn.execute("PRAGMA synchronous = FULL")
            sync = conn.execute("PRAGMA synchronous").fetchone()[0]
            if str(mode).lower() != "wal" or sync != 2:
                raise JournalError(f"journal_mode={mode!r}, synchronous={sync!r}: need wal and 2 (FULL)")
            if conn.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:  # 2: INCREMENTAL
                conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
                conn.execute("VACUUM")  # takes effect on a journal made without it only through a VACUUM
            journal = cls(path, conn, lock_fd)
            with journal._use(write=True):
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if version > SCHEMA_VERSION:
                    raise JournalError(f"{path} has schema version {version}, newer than {SCHEMA_VERSION}")
                if version == 1:
                    for statement in _TO_2:
                        conn.execute(statement)
                conn.execute(_SCHEMA)
                conn.execute(_META_SCHEMA)
                conn.execute("CREATE INDEX IF NOT EXISTS inbox_state_seq ON inbox (state, seq)")
                conn.execute("CREATE INDEX IF NOT EXISTS inbox_files_ended ON inbox (files, ended_at)")
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            return journal
        except BaseException as e:
            if conn is not None:
                conn.close()
            fcntl.flock(lock_fd, fcntl.LOCK_UN)
            os.close(lock_fd)
            if isinstance(e, sqlite3.Error | OSError):
                raise JournalError(f"cannot open the journal {path}: {e}") from e
            raise

    def close(self) -> None:
        with self._mutex:
            if self._conn is None:
                return
            conn, self._conn = self._conn, None
            try:
                conn.close()
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                os.close(self._lock_fd)

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextmanager
    def _use(self, write: bool) -> Iterator[sqlite3.Connection]:
        """The connection, under the mutex; with `write`, inside BEGIN IMMEDIATE … COMMIT."""
        with self._mutex:
            conn = self._conn
            if conn is None:
                raise JournalError("the journal is closed")
            try:
                if not write:
                    yield conn
                    return
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as e:
                raise JournalError(f"journal {self.path}: {e}") from e

    @staticmethod
    def _get(conn: sqlite3.Connection, offer_id: str) -> Record | None:
        row = conn.execute(f"{_SELECT} WHERE offer_id = ?", (offer_id,)).fetchone()
        return None if row is None else _record(row)

    def insert(self, offer_id: str, state: State, data: Mapping[str, Any]) -> Record:
        if not isinstance(offer_id, str) or not 0 < len(offer_id) <= MAX_OFFER_ID_LENGTH:
            raise ValueError(f"offer_id must be a non-empty str of at most {MAX_OFFER_ID_LENGTH} characters")
        state, text = _state(state), _encode(data)
        with self._use(write=True) as conn:
            existing = self._get(conn, offer_id)
            if existing is not None:
                raise DuplicateOffer(existing)
            conn.execute(
                "INSERT INTO inbox (offer_id, revision, state, data, updated_at) VALUES (?, 1, ?, ?, ?)",
                (offer_id, state, text, time.time()),
            )
            record = self._get(conn, offer_id)
        assert record is not None
        return record

    def meta(self, key: str) -> str | None:
        """A Worker-level value (not a record), e.g. the id of a pull that was sent but not answered."""
        with self._use(write=False) as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str | None) -> None:
        """Durably set (or, with None, delete) a Worker-level value."""
        with self._use(write=True) as conn:
            if value is None:
                conn.execute("DELETE FROM meta WHERE key = ?", (key,))
            else:
                conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def meta_page(self, prefix: str, limit: int) -> list[tuple[str, str]]:
        """Up to `limit` Worker-level values whose key starts with `prefix`, by key: (key, value)."""
        with self._use(write=False) as conn:
            rows = conn.execute(
                "SELECT key, value FROM meta WHERE substr(key, 1, ?) = ? ORDER BY key LIMIT ?",
                (len(prefix), prefix, limit),
            ).fetchall()
        return [(str(k), str(v)) for k, v in rows]

    def get(self, offer_id: str) -> Record | None:
        with self._use(write=False) as conn:
            return self._get(conn, offer_id)

    def cas(
        self, offer_id: str, expected_revision: int, *, state: State, data: Mapping[str, Any], succeeded: bool = False
    ) -> Record:
        """`succeeded`: the database acknowledged the Attempt's success (into `completed` only): its files are
        marked `succeeded`, not `failed`."""
        if succeeded and state != "completed":
            raise ValueError("only a completed record can have succeeded")

        def legal(current: State) -> bool:
            return current not in TERMINAL_STATES and (state == current or state in _MOVES.get(current, ()))

        files: Files = "succeeded" if succeeded else "failed"
        return self._swap(offer_id, expected_revision, state, data, legal, "illegal transition", files)

    def _swap(
        self,
        offer_id: str,
        expected_revision: int,
        state: State,
        data: Mapping[str, Any],
        legal: Callable[[State], bool],
        refusal: str,
        files: Files,
    ) -> Record:
        """Compare-and-set one record to `state` and `data` when `legal(its state)`; nothing written otherwise.
        Into a terminal state, also `ended_at` and `files` (NULL into lease_lost_local_execution_unverified)."""
        state, text = _state(state), _encode(data)
        with self._use(write=True) as conn:
            current = self._get(conn, offer_id)
            if current is None or current.revision != expected_revision:
                raise RevisionConflict(offer_id, expected_revision, current)
            if not legal(current.state):
                raise JournalError(f"offer {offer_id!r}: {refusal} {current.state} → {state}")
            now = time.time()
            ended = state in TERMINAL_STATES
            cursor = conn.execute(
                "UPDATE inbox SET revision = ?, state = ?, data = ?, updated_at = ?, ended_at = ?, files = ?"
                " WHERE seq = ? AND revision = ?",
                (
                    current.revision + 1, state, text, now, now if ended else None,
                    files if ended and state != "lease_lost_local_execution_unverified" else None,
                    current.seq, current.revision,
                ),
            )  # fmt: skip
            if cursor.rowcount != 1:
                raise JournalError(f"offer {offer_id!r}: the update touched {cursor.rowcount} rows")
            record = self._get(conn, offer_id)
        assert record is not None
        return record

    def page(self, after_seq: int | None, limit: int, *, states: Collection[State] | None = None) -> list[Record]:
        """Up to `limit` records after `after_seq` in insertion order; with `states`, only those
        (served by an index on (state, seq), so ended records cost a supervising tick nothing)."""
        if type(limit) is not int or not 1 <= limit <= PAGE_LIMIT_MAX or type(after_seq) not in (int, type(None)):
            raise ValueError(f"need 1 <= limit <= {PAGE_LIMIT_MAX} and an int or None cursor: {limit!r}, {after_seq!r}")
        where, params = _in_states(states)
        with self._use(write=False) as conn:
            sql = f"{_SELECT} WHERE seq > ?{where} ORDER BY seq LIMIT ?"
            rows = conn.execute(sql, (after_seq or 0, *params, limit))
            return [_record(row) for row in rows.fetchall()]

    def count(self, *, states: Collection[State] | None = None) -> int:
        where, params = _in_states(states)
        with self._use(write=False) as conn:
            row = conn.execute(f"SELECT count(*) FROM inbox WHERE true{where}", params).fetchone()  # noqa: S608
        return int(row[0])

    def resolve(self, offer_id: str, expected_revision: int, *, state: State, data: Mapping[str, Any]) -> Record:
        """The operator's settlement of an isolated record (see the module docstring): a compare-and-set
        from recovery_required or lease_lost_local_execution_unverified to lease_lost_local_execution_stopped
        only; anything else raises JournalError (RevisionConflict for a stale revision) and writes nothing."""
        return self._swap(
            offer_id, expected_revision, state, data, lambda current: current in _RESOLVABLE and state == _RESOLVED,
            "an operator cannot resolve", "failed",
        )  # fmt: skip

    def due(self, succeeded_before: float, failed_before: float, limit: int) -> list[Record]:
        """Up to `limit` records whose files may go: `succeeded` ones that ended before `succeeded_before`,
        `failed` ones before `failed_before` (oldest first)."""
        with self._use(write=False) as conn:
            rows = conn.execute(
                f"{_SELECT} WHERE (files = 'succeeded' AND ended_at < ?) OR (files = 'failed' AND ended_at < ?)"
                " ORDER BY ended_at LIMIT ?",
                (succeeded_before, failed_before, limit),
            )
            return [_record(row) for row in rows.fetchall()]

    def run_needed(self, run_id: str, other_than: str) -> bool:
        """Whether a record of the Run other than `other_than` still has files (so its directory must stay)."""
        with self._use(write=False) as conn:
            row = conn.execute(
                "SELECT 1 FROM inbox WHERE offer_id != ? AND json_extract(data, '$.offer.offer.runId') = ?"
                " AND files IS NOT 'removed' LIMIT 1",
                (other_than, run_id),
            ).fetchone()
        return row is not None

    def removed(self, offer_id: str) -> None:
        """Mark a record's files gone (a record already marked, or not due, is left as it is)."""
        with self._use(write=True) as conn:
            conn.execute("UPDATE inbox SET files = 'removed' WHERE offer_id = ? AND files IN ('succeeded', 'failed')",
                         (offer_id,))  # fmt: skip

    def prune(self, ended_before: float, keep_newest: int) -> int:
        """Delete the records whose files are `removed` and that ended before `ended_before`, except the newest
        `keep_newest` records of the journal; return the freed pages to the file system. How many went."""
        with self._use(write=True) as conn:
            deleted = conn.execute(
                "DELETE FROM inbox WHERE files = 'removed' AND ended_at < ?"
                " AND seq NOT IN (SELECT seq FROM inbox ORDER BY seq DESC LIMIT ?)",
                (ended_before, keep_newest),
            ).rowcount
        if deleted:
            with self._use(write=False) as conn:
                conn.executescript("PRAGMA incremental_vacuum")  # steps it to the end (execute frees one page)
        return int(deleted)
