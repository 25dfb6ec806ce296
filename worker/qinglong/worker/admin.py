"""`qinglong-worker journal list|show|resolve` and `qinglong-worker status`: an operator's view of one
Worker's inbox journal and status file, and the one repair an operator makes to the journal. Touches
the journal named in the config, the status file beside it (`<journal>.status.json`) and /proc; never
the network, the credentials or the work folder. The `run` command writes the status file
(`write_status`) after every tick; this module defines its format and reads it.

- `list`, `show` and `status` read the journal through a read-only SQLite connection without its
  flock, so they work while the Worker runs. (On a journal no process owns, SQLite may leave an
  empty `-wal` and `-shm` beside it, with the journal file's owner and mode.)
- `resolve` takes the journal's exclusive ownership (`Journal.open`): while a Worker process owns
  it, it refuses (JournalBusy). It moves one `recovery_required` or
  `lease_lost_local_execution_unverified` record to `lease_lost_local_execution_stopped` with
  `Journal.resolve`, keeps who, when, why and from which state in the record's `data["resolved"]`,
  and writes one JSON audit line to stderr. The Worker then no longer fails closed on it; the
  database recovers the Attempt at its Lease expiry.
- `status`: records per state, the records that need an operator, and from the status file the
  Worker's pid (stale once that process no longer runs), session id and last successful contact
  with the control plane (a session open or heartbeat), and its disk budget (free space, its own usage, and
  whether it pulls).

Nothing printed holds a lease token: `show` replaces every `leaseToken` value (and that value
wherever else it appears) with "<redacted>"; `list` and `status` print ids, states, times and
reasons, scrubbed the same way; the status file holds no token or key. A refusal or bad input is
one line on stderr and exit code 2 (AdminError, JournalError), never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import os
import sqlite3
import stat
import sys
import time
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Final

from qinglong.worker.identity import boot_id, process_start_time
from qinglong.worker.journal import SCHEMA_VERSION, STATES, Journal, JournalBusy, JournalError, State
from qinglong.worker.runner import write_atomically

STATUS_SUFFIX: Final = ".status.json"
REDACTED: Final = "<redacted>"
NEEDS_OPERATOR: Final[tuple[State, ...]] = ("recovery_required", "lease_lost_local_execution_unverified")
RESOLVED: Final[State] = "lease_lost_local_execution_stopped"
MAX_REASON_CHARS: Final = 1000
_SECRET_KEYS: Final = frozenset({"leaseToken", "lease_token"})
_SELECT: Final = "SELECT offer_id, seq, revision, state, data, updated_at FROM inbox"


class AdminError(Exception):
    """A one-line reason an operator command refuses (exit code 2)."""


# -- the status file: written by `run` after every tick, read by `status` ------------------------------


def status_path(journal: Path) -> Path:
    return journal.with_name(journal.name + STATUS_SUFFIX)


def write_status(
    journal: Path,
    *,
    session_id: str | None,
    last_contact_ms: int | None,
    failed_closed: bool,
    disk: Mapping[str, Any] | None = None,
) -> None:
    """Replace `<journal>.status.json` (0600, atomic, not fsynced): this process's identity (pid, its
    start time and the boot id, so a reused pid reads as stale), its session and last contact, and its
    disk budget (`DiskBudget.status`)."""
    pid = os.getpid()
    status = {
        "pid": pid,
        "start_time": process_start_time(pid),
        "boot_id": boot_id(),
        "session_id": session_id,
        "last_contact_ms": last_contact_ms,
        "failed_closed": failed_closed,
        "disk": disk,
        "updated_ms": time.time_ns() // 1_000_000,
    }
    write_atomically(status_path(journal), json.dumps(status, sort_keys=True).encode() + b"\n", durable=False)


# -- reading the journal without owning it ----------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    offer_id: str
    seq: int
    revision: int
    state: str
    data: Mapping[str, Any]
    updated_at: float

    @property
    def run_id(self) -> str | None:
        offer = self.data.get("offer")
        inner = offer.get("offer") if isinstance(offer, Mapping) else None
        run = inner.get("runId") if isinstance(inner, Mapping) else None
        return run if isinstance(run, str) else None

    @property
    def reason(self) -> str | None:
        reason = self.data.get("reason")
        return None if reason is None else str(reason)


def _secrets(value: object) -> Iterator[str]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            if key in _SECRET_KEYS and isinstance(item, str) and item:
                yield item
            else:
                yield from _secrets(item)
    elif isinstance(value, list):
        for item in value:
            yield from _secrets(item)


def redact(value: object, secrets: Collection[str]) -> object:
    """`value` with every secret key's value, and every occurrence of a secret in a string, redacted."""
    if isinstance(value, Mapping):
        return {k: REDACTED if k in _SECRET_KEYS and v is not None else redact(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(item, secrets) for item in value]
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, REDACTED)
    return value


def _existing(journal: Path) -> None:
    try:
        st = os.lstat(journal)
    except FileNotFoundError:
        raise AdminError(f"no journal at {journal}") from None
    except OSError as exc:
        raise AdminError(f"cannot read the journal {journal}: {exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise AdminError(f"{journal} is not a regular file")


@contextlib.contextmanager
def _reader(journal: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection (no flock: the Worker may own the journal meanwhile)."""
    _existing(journal)
    try:
        conn = sqlite3.connect(f"{journal.absolute().as_uri()}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error as exc:
        raise AdminError(f"cannot read the journal {journal}: {exc}") from None
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise AdminError(f"{journal} has schema version {version}, newer than {SCHEMA_VERSION}")
        yield conn
    except (sqlite3.Error, ValueError) as exc:
        raise AdminError(f"cannot read the journal {journal}: {exc}") from None
    finally:
        conn.close()


def _tokens(conn: sqlite3.Connection) -> frozenset[str]:
    """Every lease token the journal holds: redacted wherever it appears, in any record's output."""
    path = "'$.offer.leaseToken'"
    try:
        sql = f"SELECT json_extract(data, {path}) FROM inbox WHERE json_type(data, {path}) = 'text'"  # noqa: S608
        return frozenset(token for (token,) in conn.execute(sql) if token)
    except sqlite3.OperationalError:  # an SQLite without JSON functions
        rows = conn.execute("SELECT data FROM inbox")
        return frozenset(token for (data,) in rows for token in _secrets(json.loads(data)))


def _rows(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...] = ()) -> Iterator[Row]:
    for offer_id, seq, revision, state, data, updated_at in conn.execute(sql, params):
        yield Row(offer_id, seq, revision, state, json.loads(data), updated_at)


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _line(row: Row, secrets: Collection[str]) -> str:
    reason = "-" if row.reason is None else _printable(str(redact(row.reason, secrets)))
    ids = f"{_printable(row.offer_id)}  {_printable(row.run_id or '-')}"
    return f"{ids}  {row.state:<37}  {_iso(row.updated_at)}  {reason}"


def _summary(row: Row, secrets: Collection[str]) -> dict[str, Any]:
    return {
        "offer": row.offer_id,
        "run": row.run_id,
        "state": row.state,
        "reason": redact(row.reason, secrets),
        "updatedAt": _iso(row.updated_at),
        "revision": row.revision,
        "seq": row.seq,
    }


# -- the commands ------------------------------------------------------------------------------------------


def journal_list(journal: Path, states: Collection[str] | None, as_json: bool, out: IO[str]) -> int:
    """One line per record, oldest change first (newest last); `states` filters."""
    wanted = sorted(set(states or ()))
    where = f" WHERE state IN ({', '.join('?' * len(wanted))})" if wanted else ""
    with _reader(journal) as conn:
        secrets = _tokens(conn)
        for row in _rows(conn, f"{_SELECT}{where} ORDER BY updated_at, seq", tuple(wanted)):
            line = json.dumps(_summary(row, secrets), sort_keys=True, ensure_ascii=False) if as_json else None
            print(line or _line(row, secrets), file=out)
    return 0


def journal_show(journal: Path, offer_id: str, out: IO[str]) -> int:
    with _reader(journal) as conn:
        secrets = _tokens(conn)
        row = next(_rows(conn, f"{_SELECT} WHERE offer_id = ?", (offer_id,)), None)
    if row is None:
        raise AdminError(f"no record of offer {offer_id!r} in {journal}")
    shown = {
        "offer": row.offer_id,
        "seq": row.seq,
        "revision": row.revision,
        "state": row.state,
        "updatedAt": _iso(row.updated_at),
        "data": redact(row.data, secrets | set(_secrets(row.data))),
    }
    print(json.dumps(shown, indent=2, sort_keys=True, ensure_ascii=False), file=out)
    return 0


def _operator() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return f"uid {os.getuid()}"


def journal_resolve(journal: Path, offer_id: str, reason: str, out: IO[str], err: IO[str]) -> int:
    """Settle a record the operator has made sure no process of runs (see the module docstring)."""
    reason = reason.strip()
    if not reason or len(reason) > MAX_REASON_CHARS or not reason.isprintable():
        raise AdminError(f"--reason must say why, in one printable line of at most {MAX_REASON_CHARS} characters")
    _existing(journal)  # Journal.open would create a missing journal
    try:
        owned = Journal.open(journal)
    except JournalBusy:
        raise AdminError("a Worker process owns this journal: stop it (SIGTERM) first") from None
    with owned:
        record = owned.get(offer_id)
        if record is None:
            raise AdminError(f"no record of offer {offer_id!r} in {journal}")
        if record.state not in NEEDS_OPERATOR:
            needs = " or ".join(NEEDS_OPERATOR)
            raise AdminError(f"offer {offer_id} is {record.state}: only a {needs} record is resolved")
        at, operator = time.time(), _operator()
        data = dict(record.data)
        data["resolved"] = {"by": operator, "at": _iso(at), "reason": reason, "from": record.state}
        saved = owned.resolve(offer_id, record.revision, state=RESOLVED, data=data)
    run_id = Row(saved.offer_id, saved.seq, saved.revision, saved.state, saved.data, saved.updated_at).run_id
    audit = {"time": _iso(at), "event": "journal.resolve", "operator": operator, "offer": offer_id,
             "run": run_id, "from": record.state, "to": saved.state, "reason": reason}  # fmt: skip
    print(json.dumps(audit, sort_keys=True, ensure_ascii=False), file=err)
    print(f"offer {offer_id}: {record.state} → {saved.state}", file=out)
    return 0


def _worker_line(status: Mapping[str, Any]) -> str:
    pid, start_time = status.get("pid"), status.get("start_time")
    if type(pid) is not int or pid < 1:
        return "worker: the status file names no pid"
    try:
        same_boot = status.get("boot_id") == boot_id()
        alive = same_boot and start_time is not None and process_start_time(pid) == start_time
    except OSError as exc:
        return f"worker: pid {pid}, unknown whether it runs ({exc})"
    return f"worker: pid {pid} running" if alive else f"worker: pid {pid} no longer runs: this status is stale"


def _ms(value: object) -> str:
    if type(value) is not int:
        return "never"
    age = time.time() - value / 1000
    return f"{_iso(value / 1000)} ({age:.0f} s ago)"


def _disk(disk: object) -> str:
    if not isinstance(disk, dict):
        return "not measured"
    mib = {k: f"{v / 2**20:.1f} MiB" if type(v) is int else "unknown" for k, v in disk.items()}
    pulling = "NOT pulling: free space is below min_free_mib" if disk.get("low") else "pulling"
    return (f"{pulling}; free {mib.get('free_bytes')} (min_free_mib: {mib.get('min_free_bytes')}), "
            f"used by this Worker {mib.get('used_bytes')}")  # fmt: skip


def status(journal: Path, out: IO[str]) -> int:
    print(f"journal: {journal}", file=out)
    if not os.path.lexists(journal):
        print("  no journal yet (no Worker has started with this config)", file=out)
    else:
        with _reader(journal) as conn:
            secrets = _tokens(conn)
            counts = dict(conn.execute("SELECT state, count(*) FROM inbox GROUP BY state").fetchall())
            marks = ", ".join("?" * len(NEEDS_OPERATOR))
            needing = list(_rows(conn, f"{_SELECT} WHERE state IN ({marks}) ORDER BY updated_at, seq", NEEDS_OPERATOR))
        print(f"  records: {sum(counts.values())}", file=out)
        for state in STATES:
            if counts.get(state):
                print(f"  {state}: {counts[state]}", file=out)
        print(f"needs an operator: {len(needing) or 'none'}", file=out)
        for row in needing:
            print(f"  {_line(row, secrets)}", file=out)
    path = status_path(journal)
    try:
        found: object = json.loads(path.read_bytes())
    except FileNotFoundError:
        print(f"worker: no Worker has written a status ({path})", file=out)
        return 0
    except (OSError, ValueError) as exc:
        raise AdminError(f"cannot read the status file {path}: {exc}") from None
    if not isinstance(found, dict):
        raise AdminError(f"the status file {path} does not hold a JSON object")
    print(_worker_line(found), file=out)
    print(f"  session: {found.get('session_id') or 'none'}", file=out)
    print(f"  last contact with the control plane: {_ms(found.get('last_contact_ms'))}", file=out)
    print(f"  failed closed: {'yes' if found.get('failed_closed') else 'no'}", file=out)
    print(f"  disk: {_disk(found.get('disk'))}", file=out)
    print(f"  status written: {_ms(found.get('updated_ms'))}", file=out)
    return 0


def main(args: argparse.Namespace, journal: Path) -> int:
    """Run the operator command `args` names against `journal`; the exit code."""
    out, err = sys.stdout, sys.stderr
    try:
        if args.command == "status":
            return status(journal, out)
        if args.journal_command == "list":
            return journal_list(journal, args.state, args.json, out)
        if args.journal_command == "show":
            return journal_show(journal, args.offer, out)
        if not args.stopped:
            raise AdminError("--stopped: first make sure no process of the offer runs")
        return journal_resolve(journal, args.offer, args.reason, out, err)
    except (AdminError, JournalError) as exc:
        print(f"qinglong-worker: {exc}", file=err)
        return 2
    except BrokenPipeError:  # `… | head`: the reader left
        os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
        return 1
    except KeyboardInterrupt:
        return 130
