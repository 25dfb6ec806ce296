"""LocalProcessController: stops exactly a task's process group and nothing else (the Worker's
process layer; identity.py holds the durable handle). It signals a group only while the group
leader's identity is proven (same boot, same start time, same group, not a zombie): TERM, a grace,
then KILL; the outcome is stopped, already_exited or unverified, and an unverified pid is never
signalled. Touches: /proc, signals to the handle's process group. Standard library only.
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Final, Literal, TypeAlias

from qinglong.worker.identity import ProcessHandle, boot_id, read_stat, reap, reap_finished

# How long stop() waits for the group leader to disappear after SIGKILL.
_KILL_WAIT_S: Final = 5.0

StopOutcome: TypeAlias = Literal["stopped", "already_exited", "unverified"]
Verification: TypeAlias = Literal["alive", "exited", "unverified"]


def _probe(handle: ProcessHandle) -> Verification | Literal["reused"]:
    """The process-level part of verify (boot and status file aside): is the handle's group leader
    still running under the proven identity?"""
    try:
        st = read_stat(handle.pid)
    except (OSError, ValueError):
        return "unverified"  # cannot read /proc for the pid: identity cannot be proven
    if st is None:
        return "exited"
    if st.start_time != handle.start_time:
        return "reused"  # the pid belongs to another process now: never signal the new owner
    if st.state in ("Z", "X", "x"):
        reap(handle.pid)  # identity proven and a zombie: the pid cannot be reused until reaped
        return "exited"
    if st.pgrp != handle.pgid:
        return "unverified"  # same process, inconsistent group: do not signal any group
    return "alive"


class LocalProcessController:
    """Stops the exact local process group of a handle; never signals an unproven identity."""

    def __init__(self, *, grace_s: float = 5.0, poll_s: float = 0.05) -> None:
        if grace_s < 0 or poll_s <= 0:
            raise ValueError("grace_s must be >= 0 and poll_s > 0")
        self._grace_s = grace_s
        self._poll_s = poll_s

    def verify(self, handle: ProcessHandle) -> Verification:
        """alive: identity proven (same boot, same start time, same group, not a zombie) and running.
        exited: provably not our process running any more (other boot, status file written, gone, zombie).
        unverified: the pid now belongs to a process with another start time (ours left no status, so
        how it ended is unknown), /proc cannot be read for the pid, or the group differs."""
        try:
            if handle.boot_id != boot_id():
                return "exited"
        except OSError:
            return "unverified"
        reap_finished()
        if os.path.exists(handle.status_path):
            return "exited"
        probe = _probe(handle)
        return "unverified" if probe == "reused" else probe

    async def stop(self, handle: ProcessHandle) -> StopOutcome:
        """Verify, then TERM the group, wait up to grace_s for the group leader to exit (re-verifying
        each poll), then KILL the group if it is still verified alive."""
        initial = self.verify(handle)
        if initial == "exited":
            return "already_exited"
        if initial == "unverified":
            return "unverified"

        outcome = self._signal(handle, signal.SIGTERM)
        if outcome is not None:
            return outcome
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._grace_s
        while True:
            state = _probe(handle)
            if state in ("exited", "reused"):  # gone while we waited (the pid may be reused already)
                return "stopped"
            if state == "unverified":
                return "unverified"
            if loop.time() >= deadline:
                break
            await asyncio.sleep(min(self._poll_s, max(0.0, deadline - loop.time())))

        # Grace over and (just above) still proven alive: KILL the group.
        outcome = self._signal(handle, signal.SIGKILL)
        if outcome is not None:
            return "stopped" if outcome == "already_exited" else outcome
        deadline = loop.time() + _KILL_WAIT_S
        while True:
            state = _probe(handle)
            if state in ("exited", "reused"):  # gone while we waited (the pid may be reused already)
                return "stopped"
            if state == "unverified" or loop.time() >= deadline:
                return "unverified"  # KILL sent but the leader's end was not observed
            await asyncio.sleep(self._poll_s)

    def _signal(self, handle: ProcessHandle, signum: int) -> StopOutcome | None:
        """Signal the group right after re-proving the leader's identity; None when sent."""
        state = _probe(handle)
        if state in ("exited", "reused"):  # never signal a pid that belongs to another process now
            return "already_exited"
        if state == "unverified":
            return "unverified"
        try:
            os.killpg(handle.pgid, signum)
        except ProcessLookupError:
            _probe(handle)  # reaps a zombie wrapper of ours
            return "already_exited"
        except PermissionError:
            return "unverified"
        return None
