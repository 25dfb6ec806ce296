"""What a chaos run left behind, read after it: the tasks' own records of their executions, the runner
wrappers' files in each Worker's work folder (identity, dead-man's switch expiry, status) and the database's
rows. Touches: those files and the database (read only)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import psycopg

RUN_END_EVENTS: Final = ("run.succeeded", "run.failed", "run.cancelled", "run.timed_out")


@dataclass
class Launch:
    offer_id: str
    written: float  # the identity file's mtime (wall)
    lease_expiry_ns: int | None  # the dead-man's switch's last local expiry (CLOCK_BOOTTIME)
    status_mtime: float | None  # when the wrapper recorded the task's end (wall)


@dataclass
class Execution:
    kind: str  # start | overlap
    start: float
    pid: int
    ppid: int
    end: float | None = None
    code: int | None = None  # None: died by a signal (no `end` line)
    term: float | None = None
    launch: Launch | None = None
    attempt: dict[str, Any] | None = None


def parse_task_log(path: Path) -> list[Execution]:
    """The task's own record: `start T PID PPID`, `end T PID CODE`, `term T PID`, `overlap T PID PPID`."""
    out: list[Execution] = []
    by_pid: dict[int, Execution] = {}
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return out
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        what, t, pid = parts[0], float(parts[1]), int(parts[2])
        if what in ("start", "overlap"):
            ex = Execution(what, t, pid, int(parts[3]))
            out.append(ex)
            by_pid[pid] = ex
        elif what == "end" and pid in by_pid:
            by_pid[pid].end, by_pid[pid].code = t, int(parts[3])
        elif what == "term" and pid in by_pid:
            by_pid[pid].term = by_pid[pid].end = t
    return out


def pick_launch(candidates: list[Launch], started: float) -> Launch | None:
    """The launch of this wrapper pid whose identity was written last before the task started."""
    before = [c for c in candidates if c.written <= started + 0.01]
    return max(before, key=lambda c: c.written) if before else None


def read_database(dsn: str) -> dict[str, Any]:
    """The rows the counts need: Runs, Attempts (by Run and by offer), Run end events, and the event faults."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        runs = {
            str(r[0]): {"status": str(r[1]), "cancel_requested_at_ms": r[2], "cancel_reason": r[3]}
            for r in conn.execute(
                "select id, status::text, cancel_requested_at_ms, cancel_reason::text from ql.runs"
            ).fetchall()
        }
        attempts: dict[str, list[dict[str, Any]]] = {}
        by_offer: dict[str, dict[str, Any]] = {}
        for r in conn.execute(
            "select a.run_id, a.attempt_no, a.status::text, a.worker_id, a.offer_id, a.exit_code, a.error_code,"
            " l.expires_at_ms, a.claimed_at_ms, a.deadline_at_ms"
            " from ql.run_attempts a left join ql.run_leases l on l.attempt_id = a.id"
            " order by a.run_id, a.attempt_no"
        ).fetchall():
            a = {
                "attempt_no": r[1],
                "status": r[2],
                "worker_id": str(r[3]),
                "offer_id": str(r[4]),
                "exit_code": r[5],
                "error_code": r[6],
                "lease_expires_at_ms": r[7],
                "claimed_at_ms": r[8],
                "deadline_at_ms": r[9],
            }
            attempts.setdefault(str(r[0]), []).append(a)
            by_offer[str(r[4])] = a
        ends = {
            str(r[0]): int(r[1])
            for r in conn.execute(
                "select run_id, count(*) from ql.run_events where type = any(%s) group by run_id",
                (list(RUN_END_EVENTS),),
            ).fetchall()
        }
        # the checks of tests/integration/db/factories.py: stream_faults and duplicate_events
        faults = conn.execute(
            "select r.id from ql.runs r left join ql.run_events e on e.run_id = r.id group by r.id"
            " having r.version <> 1 + r.event_sequence or r.event_sequence <> count(e.sequence)"
            " or coalesce(min(e.sequence), 1) <> 1 or coalesce(max(e.sequence), 0) <> count(e.sequence)"
        ).fetchall()
        dup = conn.execute(
            "select count(*) - count(distinct event_id), count(*) - count(distinct dedupe_key) from ql.run_events"
        ).fetchone()
        assert dup is not None
    return {
        "runs": runs,
        "attempts": attempts,
        "by_offer": by_offer,
        "ends": ends,
        "duplicate_events": len(faults) + int(dup[0]) + int(dup[1]),
    }


def read_launches(work_dirs: Iterable[Path]) -> dict[int, list[Launch]]:
    """Every runner launch in these Worker work folders, by the wrapper's pid."""
    found: dict[int, list[Launch]] = {}
    for work_dir in work_dirs:
        if not work_dir.exists():
            continue
        for identity in work_dir.glob("*/*.identity.json"):
            try:
                data = json.loads(identity.read_bytes())
            except (OSError, ValueError):
                continue
            base = identity.with_name(identity.name.removesuffix(".identity.json"))
            lease = base.with_suffix(".lease")
            status = base.with_suffix(".status.json")
            expiry = None
            with contextlib.suppress(OSError, ValueError):
                expiry = int(lease.read_text().strip())
            mtime = None
            with contextlib.suppress(OSError):
                mtime = status.stat().st_mtime
            launch = Launch(identity.parent.name, identity.stat().st_mtime, expiry, mtime)
            found.setdefault(int(data["pid"]), []).append(launch)
    return found
