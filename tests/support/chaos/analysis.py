"""The counts of a chaos run, from what it left (tests.support.chaos.evidence) and the faults it did: every
execution matched to its runner launch and Attempt, then healthy tasks stopped, reruns after exit 0, spawns
after a cancel, overlaps, wrong outcomes, Runs not ended once, and the stop lags after a local expiry.
Definitions: bench/README.md, part (e). Touches nothing: pure functions over what it is given."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from qinglong.wire.common import ENDED_RUN_STATUSES
from qinglong.worker.identity import boottime_ns
from tests.support.chaos.config import RunSpec
from tests.support.chaos.evidence import Launch, parse_task_log, pick_launch
from tests.support.chaos.workers import Fault

TERMINAL: Final = frozenset(ENDED_RUN_STATUSES)

ZEROS: Final = (
    "healthy_tasks_stopped",
    "reruns_after_exit0",
    "spawned_after_cancel",
    "overlapping_executions",
    "stuck",
    "duplicate_events",
    "wrong_outcomes",
    "ended_not_once",
)


@dataclass
class Tally:
    """What the per-Run checks found: each count, up to five examples of each, the stop lags after a
    local expiry and the executions seen."""

    counts: dict[str, int]
    examples: dict[str, list[str]]
    lags: list[float]
    executions: int


def tally(
    specs: Sequence[RunSpec],
    faults_by_worker: Mapping[str, list[Fault]],
    db: Mapping[str, Any],
    launches: Mapping[int, list[Launch]],
) -> Tally:
    """Every Run's executions checked against its Attempts, its cancel and the faults of its Workers."""
    offset_ns = time.time_ns() - boottime_ns()  # wall = boottime + offset

    def faulted(worker_id: str | None, start: float, end: float) -> bool:
        return worker_id is None or any(f.start <= end and start <= f.end for f in faults_by_worker.get(worker_id, []))

    def down_at(attempt: dict[str, Any]) -> bool:
        """Its Worker could not renew it when its Lease expired: the Worker was down (killed, frozen)
        at that instant, or the Attempt was claimed before its Worker's journal was deleted (the
        Worker restarted with a fresh journal knows nothing of it)."""
        if attempt["lease_expires_at_ms"] is None:
            return False
        instant, claimed = attempt["lease_expires_at_ms"] / 1000, attempt["claimed_at_ms"] / 1000
        return any(
            f.start <= instant <= f.end or (f.kind == "journal" and claimed <= f.start <= instant)
            for f in faults_by_worker.get(attempt["worker_id"], [])
        )

    counts = {
        "healthy_tasks_stopped": 0,
        "reruns_after_exit0": 0,
        "spawned_after_cancel": 0,
        "overlapping_executions": 0,
        "wrong_outcomes": 0,
        "ended_not_once": 0,
        "unmatched_executions": 0,
    }
    lags: list[float] = []
    executions_total = 0
    examples: dict[str, list[str]] = {k: [] for k in counts}

    def flag(key: str, spec: RunSpec, detail: str) -> None:
        counts[key] += 1
        if len(examples[key]) < 5:
            examples[key].append(f"run {spec.index} {spec.run_id} ({spec.kind}): {detail}")

    for spec in specs:
        row = db["runs"].get(spec.run_id)
        attempts = db["attempts"].get(spec.run_id, [])
        execs = parse_task_log(spec.folder / "log")
        executions_total += len(execs)
        # which attempt (offer, Worker) each execution belongs to: its parent is the runner wrapper
        for ex in execs:
            launch = pick_launch(launches.get(ex.ppid, []), ex.start)
            if launch is None:
                flag("unmatched_executions", spec, f"pid {ex.pid}: no runner launch with pid {ex.ppid}")
                continue
            ex.launch = launch
            ex.attempt = db["by_offer"].get(launch.offer_id)
            if ex.end is None and launch.status_mtime is not None:
                ex.end = launch.status_mtime
            if launch.lease_expiry_ns is not None and ex.end is not None:
                lag = (ex.end * 1e9 - offset_ns - launch.lease_expiry_ns) / 1e9
                if lag > 0:
                    lags.append(lag)
        # overlaps: a flock refused, or two executions' lifetimes intersect
        for ex in execs:
            if ex.kind == "overlap":
                flag("overlapping_executions", spec, f"flock refused at {ex.start:.3f}")
        lives = sorted((ex.start, ex.end if ex.end is not None else math.inf) for ex in execs if ex.kind != "overlap")
        for (_, e1), (s2, _) in itertools.pairwise(lives):
            if s2 < e1:
                flag("overlapping_executions", spec, f"started {s2:.3f} before the previous ended {e1:.3f}")
        intent_s = (
            None if row is None or row["cancel_requested_at_ms"] is None else row["cancel_requested_at_ms"] / 1000
        )
        # healthy tasks stopped: died by a signal, no intent yet, its Worker never faulted meanwhile
        for ex in execs:
            if ex.kind != "start" or ex.code is not None:
                continue
            died = ex.term if ex.term is not None else ex.end if ex.end is not None else time.time()
            if intent_s is not None and died >= intent_s - 0.001:
                continue
            worker = None if ex.attempt is None else ex.attempt["worker_id"]
            if not faulted(worker, ex.start, died):
                flag("healthy_tasks_stopped", spec, f"pid {ex.pid} died at {died:.3f} (worker {worker})")
        # reruns after exit 0 (unless its Lease expired while its Worker was down)
        for ex in execs:
            if ex.code != 0 or ex.end is None:
                continue
            later = [e for e in execs if e.start > ex.end and e.kind == "start"]
            if not later:
                continue
            att = ex.attempt
            excused = att is not None and att["status"] == "lost" and down_at(att)
            if not excused:
                flag("reruns_after_exit0", spec, f"exit 0 at {ex.end:.3f}, then {len(later)} more start(s)")
        # starts after a cancel accepted while the Run had not started
        c = spec.cancel
        if c is not None and c.get("status") == "accepted" and c.get("runStatus") in ("queued", "retry_wait", "lost"):
            for ex in execs:
                if ex.kind == "start" and ex.start > c["sent"]:
                    flag("spawned_after_cancel", spec, f"started {ex.start - c['sent']:.3f} s after the cancel")
        # the outcome its task and its users caused
        if row is None or row["status"] not in TERMINAL:
            continue  # stuck: counted below
        expected = expected_outcomes(spec, attempts, down_at)
        if row["status"] not in expected:
            flag("wrong_outcomes", spec, f"{row['status']}, expected {sorted(expected)}; attempts "
                 + ", ".join(f"{a['attempt_no']}:{a['status']}/{a['exit_code']}/{a['error_code']}"
                             for a in attempts))  # fmt: skip
        if db["ends"].get(spec.run_id, 0) != 1:
            flag("ended_not_once", spec, f"{db['ends'].get(spec.run_id, 0)} run end events")
    return Tally(counts, examples, lags, executions_total)


def expected_outcomes(
    spec: RunSpec, attempts: list[dict[str, Any]], down_at: Callable[[dict[str, Any]], bool]
) -> set[str]:
    """The Run statuses its kind, its cancel and its Attempts allow (empty: none would be right)."""
    c = spec.cancel
    if c is not None and c.get("status") == "accepted":
        return {"cancelled"}  # an intent always wins, over an exit code and over a retry
    if c is not None and c.get("status") == "already_requested":
        return {"timed_out"} if spec.kind == "timeout" else set()  # only a timeout intent came first
    expected = {"ok": "succeeded", "ok_long": "succeeded", "fail": "failed", "timeout": "timed_out"}[spec.kind]
    if spec.kind == "timeout":
        # Lost once its deadline had come under its Lease: timed out (decision 0016). Lost with its deadline still
        # ahead of its Lease's expiry (a Lease not renewed since the claim, then a fault): an ordinary loss.
        early = any(a["status"] == "lost" and (a["deadline_at_ms"] or 0) > (a["lease_expires_at_ms"] or 0)
                    for a in attempts)  # fmt: skip
        return {expected, "failed"} if early else {expected}
    # An Attempt lost while its Worker was down (its Lease expired meanwhile) may spend the last try.
    lost_while_down = any(a["status"] == "lost" and down_at(a) for a in attempts)
    tries = [a for a in attempts if a["status"] != "abandoned"]  # an abandoned claim spends no try
    if spec.kind == "fail" and not lost_while_down and len(tries) != spec.max_attempts:
        return set()  # exit 1 must fail after exactly its attempts
    return {expected, "failed"} if lost_while_down else {expected}
