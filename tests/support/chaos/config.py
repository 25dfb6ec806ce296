"""What one chaos run is made of: its settings, the task every Run executes (which records its own
execution), and the Runs planned at random. Touches: the Runs' task folders (made by plan_runs)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

# The task: an exclusive flock for its whole life, then its own record of its execution.
TASK_SCRIPT: Final = (
    'd=$1; exec 9>"$d/lock"; '
    'if ! flock -n 9; then echo "overlap $(date +%s.%N) $$ $PPID" >>"$d/log"; exit 75; fi; '
    'echo "start $(date +%s.%N) $$ $PPID" >>"$d/log"; '
    'trap \'echo "term $(date +%s.%N) $$" >>"$d/log"; exit 143\' TERM; '
    'sleep "$2" & wait $!; '
    'echo "end $(date +%s.%N) $$ $3" >>"$d/log"; exit "$3"'
)


@dataclass
class ChaosConfig:
    runs: int = 500
    workers: int = 3
    capacity: int = 3
    tick_s: float = 0.4
    stop_grace_s: float = 1.0
    lease_ttl_ms: int = 3500
    offer_ttl_ms: int = 3500
    reconcile_grace_ms: int = 2500  # > stop grace + 1 s (decision 0004, rule 5)
    converge_every_s: float = 0.5
    max_active: int = 18  # Runs queued or running at once (the submitter waits beyond it)
    submit_every_s: float = 0.45  # the pace of queueing (faults go on while Runs are queued)
    cancel_share: float = 0.15
    # per request on an established connection (the proxy)
    p_lose_answer: float = 0.02
    p_cut_answer: float = 0.01
    p_stall: float = 0.01
    p_reset: float = 0.01
    stall_s: tuple[float, float] = (0.3, 1.5)
    fault_every_s: float = 6.0  # mean pause between Worker faults (exponential)
    drain_s: float = 60.0  # after the last Run was queued and every Worker is back
    seed: int | None = None

    @property
    def long_down_s(self) -> float:
        """A Worker kept down this long loses its Leases: TTL + reconcile grace + 1.5 s."""
        return self.lease_ttl_ms / 1000 + self.reconcile_grace_ms / 1000 + 1.5


@dataclass
class RunSpec:
    index: int
    kind: str  # ok | ok_long | fail | timeout
    sleep_s: float
    code: int
    max_attempts: int
    timeout_ms: int | None
    folder: Path
    cancel_after_s: float | None
    task_id: str = ""
    run_id: str = ""
    cancel: dict[str, Any] | None = None  # {sent, received, http, status, runStatus}


def plan_runs(rng: random.Random, cfg: ChaosConfig, tasks: Path) -> list[RunSpec]:
    """`cfg.runs` Runs of random kinds, each with its own record folder under `tasks`."""
    specs: list[RunSpec] = []
    for i in range(cfg.runs):
        x = rng.random()
        if x < 0.40:
            kind, sleep_s, code, timeout = "ok", rng.uniform(0.1, 0.8), 0, None
        elif x < 0.60:
            kind, sleep_s, code, timeout = "ok_long", rng.uniform(2.0, 4.5), 0, None
        elif x < 0.82:
            kind, sleep_s, code, timeout = "fail", rng.uniform(0.1, 0.6), 1, None
        else:
            kind, sleep_s, code, timeout = "timeout", 30.0, 0, rng.randint(600, 1500)
        attempts = rng.choice((1, 2, 3)) if kind != "timeout" else rng.choice((1, 2))
        cancel_after: float | None = None
        if rng.random() < cfg.cancel_share:
            cancel_after = 0.0 if rng.random() < 0.35 else rng.uniform(0.1, 4.0)
        folder = tasks / str(i)
        folder.mkdir(parents=True)
        specs.append(RunSpec(i, kind, sleep_s, code, attempts, timeout, folder, cancel_after))
    return specs
