"""LocalProcessController: stops exactly a task's process group and nothing else (the Worker's
process layer; identity.py holds the durable handle). It signals a group only while the group
leader's identity is proven (same boot, same start time, same group, not a zombie): TERM, a grace,
then KILL; the outcome is stopped, killed (the task outlived the grace and was KILLed), already_exited or
unverified, and an unverified pid is never signalled. The KILL goes first to every member of the group but the
runner wrapper (its leader), each through a pidfd opened before its group is checked, so the wrapper records how
the task ended (signal 9) before it exits; only a wrapper that has not exited soon after is KILLed with its group.
A caller's `before_kill` runs just before the first KILL (the coordinator journals it there, so the completion
says the task was killed after ignoring its stop signal, also after a restart). Touches: /proc, signals to the
handle's process group. Standard library only.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from typing import Final, Literal, TypeAlias

from qinglong.worker.identity import ProcessHandle, boot_id, read_stat, reap, reap_finished
from qinglong.worker.runner import group_members

# How long stop() waits for the group leader to disappear after SIGKILL.
_KILL_WAIT_S: Final = 5.0
_KILL_ROUNDS: Final = 20  # passes over the group's members (a task that forks while it is KILLed)

StopOutcome: TypeAlias = Literal["stopped", "killed", "already_exited", "unverified"]
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

    async def stop(self, handle: ProcessHandle, before_kill: Callable[[], None] | None = None) -> StopOutcome:
        """Verify, then TERM the group, wait up to grace_s for the group leader to exit (re-verifying
        each poll), then (`before_kill` first) KILL the task if it is still verified alive: killed."""
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

        # Grace over and (just above) still proven alive: KILL the task, then (a wrapper that lingers) the group.
        if before_kill is not None:
            before_kill()
        outcome = self._kill_members(handle)
        if outcome is not None:
            return "stopped" if outcome == "already_exited" else outcome
        deadline = loop.time() + _KILL_WAIT_S
        group_killed = False
        while True:
            state = _probe(handle)
            if state in ("exited", "reused"):  # gone while we waited (the pid may be reused already)
                return "killed"
            if state == "unverified" or loop.time() >= deadline:
                return "unverified"  # KILL sent but the leader's end was not observed
            if not group_killed and loop.time() >= deadline - _KILL_WAIT_S / 2:
                group_killed = True  # the wrapper did not record the end in time: KILL it with the group
                outcome = self._signal(handle, signal.SIGKILL)
                if outcome is not None:
                    return "killed" if outcome == "already_exited" else outcome
            await asyncio.sleep(self._poll_s)

    def _kill_members(self, handle: ProcessHandle) -> StopOutcome | None:
        """KILL every member of the group but its leader (the wrapper), right after re-proving the leader's
        identity (while it lives, the group id cannot be reused); None when done. Each pid is opened as a pidfd
        first and signalled only if that process is in the group: a pid reused meanwhile is never signalled.
        Bounded rounds: members forked meanwhile get theirs in the next one."""
        state = _probe(handle)
        if state in ("exited", "reused"):
            return "already_exited"
        if state == "unverified":
            return "unverified"
        for _ in range(_KILL_ROUNDS):
            if not [pid for pid in group_members(handle.pgid, but=handle.pid) if _kill_exactly(pid, handle.pgid)]:
                break
        return None

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


def _kill_exactly(pid: int, pgid: int) -> bool:
    """SIGKILL the process `pid` if it runs (not a zombie) in group `pgid`, through a pidfd (the exact process,
    never a reuse of its pid); whether it was signalled."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False  # gone already
    try:
        st = read_stat(pid)
        if st is None or st.pgrp != pgid or st.state in ("Z", "X", "x"):
            return False
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        return True
    except (OSError, ValueError):
        return False  # gone meanwhile, or /proc unreadable: the group KILL after the wait is the backstop
    finally:
        os.close(fd)
