"""Launch recovery: a restart that finds a record `launching` decides from the launch's evidence
whether its task never started, is running (adopt it) or ran (report its exit). Reads the launch's
files under the Executor's work folder and /proc; signals nothing and writes nothing.

The evidence, in the order the Executor and the runner wrapper leave it:
1. the log is created exclusively just before the wrapper is spawned: no log → never spawned;
2. the wrapper writes its identity file (pid, start time, boot id) before it starts the task:
   no identity file and no wrapper process naming that log → the task never started;
3. an identity file of this boot → the durable handle: adopt it. The coordinator then sees a live
   process, an exit status, or a group that provably vanished, exactly as for any started record.
Anything else (a wrapper alive without its identity, an identity of another boot beside a status
file) contradicts itself and stays `recovery_required` for an operator.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from qinglong.worker.executor import Executor
from qinglong.worker.identity import ProcessHandle, boot_id


@dataclass(frozen=True)
class LaunchEvidence:
    handle: ProcessHandle | None  # adopt this handle (running or ended)
    never_started: bool  # proven: no task process was ever started
    reason: str


def _wrapper_alive(log: Path) -> bool:
    """A process whose argv names this launch's log (the wrapper, before it wrote its identity)."""
    needle = os.fsencode(str(log))
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if needle in f.read().split(b"\0"):
                    return True
        except OSError:
            continue
    return False


def recover_launch(executor: Executor, offer_id: str, launch_nonce: str) -> LaunchEvidence:
    log, status = executor.paths(offer_id, launch_nonce)
    if not log.exists():
        return LaunchEvidence(None, True, "no launch log: the wrapper was never spawned")
    try:
        identity = json.loads(executor.identity_path(log).read_bytes())
        pid, start_time, boot = identity["pid"], identity["startTime"], identity["bootId"]
    except FileNotFoundError:
        if _wrapper_alive(log):
            return LaunchEvidence(None, False, "a wrapper runs without its identity file")
        if status.exists():
            return LaunchEvidence(None, False, "a status file without the wrapper's identity")
        return LaunchEvidence(None, True, "no wrapper identity and no wrapper: the task never started")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return LaunchEvidence(None, False, f"unreadable wrapper identity ({type(exc).__name__})")
    if boot != boot_id():
        return LaunchEvidence(None, False, "the launch belongs to another boot")
    try:
        handle = ProcessHandle(pid, pid, start_time, boot, str(log), str(status), launch_nonce)
    except ValueError as exc:
        return LaunchEvidence(None, False, f"malformed wrapper identity: {exc}")
    return LaunchEvidence(handle, False, "adopted the launch's wrapper from its identity")
