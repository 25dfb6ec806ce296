"""WorkerRemoteExecutionControlCoordinator.reconcile(offer_id): keep one started Attempt honest
(seed ADR-0118 §4). Touches the journal (compare-and-set), the control plane (through the one client)
and the local process (through the identity-checked controller). No timers: the lifecycle calls it.

In order, for one record, single-flight per offer:
1. completion first: when the process has exited — its status file, or it is provably gone without
   one (the wrapper was killed) — or a completion is pending, upload the log and
   complete with the receipts and the LATEST persisted Lease version; a transport failure here is
   isolated and does not block step 3 while the process still runs. A completion fenced
   stale_version means a renewal committed while its answer was lost: replay lease control (the
   database answers the stored renewal), persist it, then complete once more;
2. local Lease expired (CLOCK_BOOTTIME, measured from the instant the renewal was SENT, or another
   boot) → stop the exact local process and never call the control plane:
   lease_lost_local_execution_stopped, or ..._unverified when identity or signals cannot be proven;
3. otherwise lease control with the full fence, its timeout bounded by the time left on the local
   Lease: renewed | stop_requested → persist the new version and local expiry BEFORE acting, then
   move the runner's dead-man's switch to it; stop_requested → stop the process (its completion
   follows); terminal or a fence → stop the exact local identity, then isolate as
   control_plane_terminal; a transport failure → re-check the local expiry at once (step 2).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from typing import Final

from qinglong.wire import ArtifactUploadRequest, CompletionArtifact, CompletionRequest, LeaseControlRequest
from qinglong.worker.client import (
    ClientError,
    Refused,
    Session,
    TransportError,
    Unauthenticated,
    WorkerIngressHttpsClient,
)
from qinglong.worker.controller import LocalProcessController
from qinglong.worker.executor import Executor
from qinglong.worker.identity import ProcessHandle, boottime_ns
from qinglong.worker.inbox import Inbox, save
from qinglong.worker.journal import TERMINAL_STATES, Journal, Record, State

LOG_CAP: Final = 1024 * 1024
MIN_CALL_S: Final = 0.5  # the shortest budget a lease-control call is given near the local expiry
SUPERVISED: Final[frozenset[State]] = frozenset({"started", "running_acknowledged", "completion_pending"})


class WorkerRemoteExecutionControlCoordinator:
    def __init__(
        self,
        journal: Journal,
        client: WorkerIngressHttpsClient,
        executor: Executor,
        controller: LocalProcessController,
    ) -> None:
        self._journal = journal
        self._client = client
        self._executor = executor
        self._controller = controller
        self._inflight: dict[str, asyncio.Task[Record | None]] = {}

    async def reconcile(self, offer_id: str, session: Session | None) -> Record | None:
        """Reconcile one record; concurrent calls for the same offer share one run."""
        task = self._inflight.get(offer_id)
        if task is None:
            task = asyncio.ensure_future(self._reconcile(offer_id, session))
            self._inflight[offer_id] = task
            task.add_done_callback(lambda _: self._inflight.pop(offer_id, None))
        return await asyncio.shield(task)

    def _save(self, record: Record, state: State, inbox: Inbox) -> Record:
        return save(self._journal, record, state, inbox)

    async def _reconcile(self, offer_id: str, session: Session | None) -> Record | None:
        record = self._journal.get(offer_id)
        if record is None or record.state in TERMINAL_STATES or record.state not in SUPERVISED:
            return record
        inbox = Inbox.from_data(record.data)
        assert inbox.handle is not None
        handle = ProcessHandle.from_dict(inbox.handle)
        exit_status = self._executor.exit_status(handle)
        vanished = exit_status is None and self._vanished(handle)
        if (exit_status is not None or vanished or record.state == "completion_pending") and session is not None:
            record, done = await self._complete(record, inbox, handle, session)
            if done:
                return record
            inbox = Inbox.from_data(record.data)
        if inbox.expired_locally():
            return await self._stop_lease_lost(record, inbox, handle)
        if session is None:
            return record  # no session: nothing can be renewed; the local expiry above still protects
        return await self._lease_control(record, inbox, handle, session)

    async def _stop_lease_lost(self, record: Record, inbox: Inbox, handle: ProcessHandle) -> Record:
        outcome = await self._controller.stop(handle)
        state: State = (
            "lease_lost_local_execution_unverified" if outcome == "unverified" else "lease_lost_local_execution_stopped"
        )
        return self._save(record, state, inbox.replace(reason=f"local lease expired: {outcome}"))

    def _vanished(self, handle: ProcessHandle) -> bool:
        """The task is provably gone without a status: the wrapper exited on this boot and its process
        group has no member left (a group id is not reused while it has members). Anything less certain
        (an unverifiable pid, a child still running) is not an end."""
        if self._controller.verify(handle) != "exited":
            return False
        try:
            os.killpg(handle.pgid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False

    async def _complete(
        self, record: Record, inbox: Inbox, handle: ProcessHandle, session: Session, *, replay: bool = True
    ) -> tuple[Record, bool]:
        status = self._executor.exit_status(handle)
        if record.state != "completion_pending":
            exit_code = status.exit_code if status is not None else None
            # no status file: the runner wrapper itself was killed (or the pid now belongs to another process)
            error = None if exit_code is not None else ("process.killed" if status is not None else "process.vanished")
            record = self._save(record, "completion_pending", inbox.replace(exit_code=exit_code, error_code=error))
            inbox = Inbox.from_data(record.data)
        fence = inbox.fence(session.generation)
        try:
            if not inbox.receipts:
                log = self._executor.read_log(handle, LOG_CAP)
                body = ArtifactUploadRequest(
                    **fence, kind="log", sha256=hashlib.sha256(log).hexdigest(), size=len(log), content=log
                )
                stored = await self._client.upload(session, inbox.offer_id, body)
                record = self._save(record, "completion_pending", inbox.replace(receipts=(stored.receipt.to_obj(),)))
                inbox = Inbox.from_data(record.data)
            artifacts = tuple(
                CompletionArtifact(artifact_id=r["artifactId"], sha256=r["sha256"], size=r["size"])
                for r in inbox.receipts
            )
            done = await self._client.complete(
                session,
                inbox.offer_id,
                CompletionRequest(
                    **fence,
                    lease_version=inbox.lease_version,
                    exit_code=inbox.exit_code,
                    error_code=inbox.error_code,
                    artifacts=artifacts,
                ),
            )
        except (TransportError, Unauthenticated):
            return record, False  # isolated: the lease path still runs
        except Refused as refused:
            if refused.code == "fenced.stale_version" and replay:
                # A renewal committed while its answer was lost: replay it, persist it, complete again.
                renewed = await self._lease_control(record, inbox, handle, session)
                if renewed.state != "completion_pending":
                    return renewed, True
                again = Inbox.from_data(renewed.data)
                if again.lease_version == inbox.lease_version:
                    return renewed, False  # the replay got no answer either: the next tick tries again
                return await self._complete(renewed, again, handle, session, replay=False)
            return self._save(record, "control_plane_terminal", inbox.replace(reason=refused.code)), True
        except ClientError as error:
            return self._save(record, "recovery_required", inbox.replace(reason=f"protocol: {error}")), True
        snapshot = done.snapshot.to_obj()
        return self._save(record, "completed", inbox.replace(snapshot=snapshot, reason=done.status)), True

    async def _lease_control(self, record: Record, inbox: Inbox, handle: ProcessHandle, session: Session) -> Record:
        body = LeaseControlRequest(
            **inbox.fence(session.generation), offer_id=inbox.offer_id, expected_version=inbox.lease_version
        )
        left = inbox.lease_left_s()
        timeout_s = None if left is None else max(MIN_CALL_S, left)
        sent_at = boottime_ns()
        try:
            answer = await self._client.lease_control(session, body, timeout_s=timeout_s)
        except (TransportError, Unauthenticated):
            if inbox.expired_locally():  # the call outlived the Lease: stop now, not a tick later
                return await self._stop_lease_lost(record, inbox, handle)
            return record  # the local expiry decides if the control plane stays unreachable
        except Refused as refused:
            await self._controller.stop(handle)
            return self._save(record, "control_plane_terminal", inbox.replace(reason=refused.code))
        except ClientError as error:
            return self._save(record, "recovery_required", inbox.replace(reason=f"protocol: {error}"))
        if answer.status == "terminal":
            await self._controller.stop(handle)
            return self._save(
                record, "control_plane_terminal", inbox.replace(reason=f"terminal {answer.attempt_status}")
            )
        renewed = inbox.granted(answer.lease_version, sent_at, answer.expires_at_ms - answer.renewed_at_ms)
        record = self._save(record, record.state, renewed)  # persist before acting (seed ADR-0118 §4 item 4)
        if renewed.lease_expires_boottime_ns is not None:
            with contextlib.suppress(OSError):  # unwritten, the old expiry stops the task early, never late
                self._executor.extend_lease(handle, renewed.lease_expires_boottime_ns)
        if answer.status == "stop_requested":
            await self._controller.stop(handle)
        return record
