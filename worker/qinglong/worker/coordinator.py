"""Coordinator.reconcile(offer_id): keep one started Attempt honest
(decision 0000 (ADR-0118 §4)) and ship its output. Touches the journal (compare-and-set), the control plane
(through the one client), the local process (through the identity-checked controller) and its output
files (read only, through the Executor). No timers: the lifecycle calls it.

In order, for one record, single-flight per offer:
1. completion first: when the process has exited — its status file, or it is provably gone without
   one (the wrapper was killed) — or a completion is pending, drain its output (below: every stream
   up to the size its file had when the drain began) and complete with the exit and the LATEST
   persisted Lease version (no exit code: the task was ended by a signal, process.killed; or its wrapper
   left no status, process.vanished; either after this Worker KILLed it at the end of a stop's grace:
   process.killed_after_grace); a transport failure of the drain or the completion is isolated, leaves
   the completion to the next tick and does not block step 3 while the process still runs; a
   refused append (e.g. fenced.state_drift: the Attempt ended while this Worker was away), or a 5xx
   the shell answered for it, goes on to the completion, which decides (output never holds a Run's
   end back, decision 0007 item 4), and so do DRAIN_STALLS drains in a row that got no byte
   through. A completion fenced stale_version means a renewal committed while its answer was lost:
   replay lease control (the database answers the stored renewal), persist it, then complete once more;
2. local Lease expired (CLOCK_BOOTTIME, measured from the instant the renewal was SENT, or another
   boot) → stop the exact local process and never call the control plane:
   lease_lost_local_execution_stopped, or ..._unverified when identity or signals cannot be proven;
3. otherwise lease control with the full fence, its timeout bounded by the time left on the local
   Lease; for a `started` record it takes the running ACK along (`running`, decision 0031: the Processor leaves
   it here right after the spawn) and the record becomes `running_acknowledged` with the renewal:
   renewed | stop_requested → persist the new version and local expiry BEFORE acting, then
   move the runner's dead-man's switch to it; stop_requested → stop the process (its completion
   follows); terminal or a fence → stop the exact local identity, then isolate as
   control_plane_terminal; a transport failure → re-check the local expiry at once (step 2);
4. output, only after a renewal answered in this tick (renewal never waits behind output): at most
   one chunk (≤ CHUNK_MAX_BYTES) per stream with unsent bytes, each call bounded by a quarter of the
   local Lease left; a failed append is isolated (the lease path decides).

Output (stdout and stderr, each its own stream) leaves the Worker masked: every occurrence of a secret value
the Attempt received (and of its common encodings, masking.py) is `***` in what is shipped. Where each stream
stands is kept in memory only, per offer (`Cursor`): the raw bytes read from its file and fed to a Masker
(`raw_read`), the masked bytes not yet acknowledged or skipped (`pending`, from masked offset `base`), and the
database's last answer (nextOffset, headBytes, tailBytes), which counts MASKED bytes: the database holds the
masked stream and is the authority, so nothing about output is journaled. Masking changes lengths, so raw
and masked offsets differ; the masked stream depends only on the raw bytes (never on how they were cut), so
it can be rebuilt: a stream not yet answered (a new task, a Worker restart, a refused append) is masked again
from raw offset 0 and sent from masked offset 0; the database answers a replay with the nextOffset it holds,
and the masked bytes below it are dropped as they are made again. Once nextOffset ≥ headBytes and more than
tailBytes are unsent, the next chunk skips ahead to masked size - tailBytes (`next_chunk`): a long log costs
its head and its tail on the wire (its whole raw file is still read and masked, to know the masked size; at
most MASK_READ_BYTES per append call, so a long catch-up takes several calls and never holds the tick). The
Masker holds back up to its longest pattern less one byte, which could still become a secret, until more
output comes; the drain before the completion flushes it once the file is read up to the size it had when the
drain began (a straggler's later bytes are then never shipped). A plan that names no secret (or values too
short to mask) ships the raw stream and reads only the bytes it sends.
A stream's spool on disk keeps its head and only its last bytes (spool.py, decision 0030): a task that writes
faster than the Worker ships (or a Worker that was down) leaves a cut, where the reader finds its next bytes
further on. Without a Masker the chunk goes at its raw offset (a gap the database takes once it holds the head).
With one (`Cursor._cut`) the Masker is cut (Masker.cut: the bytes on both sides of a cut are masked whole, so no
part of an occurrence the cut split leaves) and the masked stream goes on contiguously, or from the database's
nextOffset where that is further on (a restarted Worker whose first reads met the cut sooner): the bytes there
may repeat some the database holds, never overwrite them.
Output a lost Lease leaves behind (decision 0028): when the local Lease expires and the task is stopped, the bytes
each stream's file holds are kept in the journal's meta (`output_lost:<offer>`) before the record becomes lease-lost.
Once a session is up again, `report_lost_output` (the lifecycle calls it each tick) sends what the database does not
hold yet, as long as it takes it (its Lease may outlive the local one by the call's latency); when it refuses
(fenced: the Lease expired, the Attempt is lost), or the bytes cannot be read or masked any more (a plan with secrets
has its raw files removed at the end), it records the stream as lost in the Run's history (output_lost: an
output.lost event with the bytes written and the bytes stored) and logs output.lost. Nothing is dropped without a
word: a stream is either all in the database or said to be lost there (or, when even that is refused, in the log).

The values: the ones the Processor spawned with (SecretValues, memory only); after a Worker restart they are
had again before any output is shipped by replaying the starting ACK (after the running ACK, so the replay can
only answer already_running, never start or end anything). An answer that lacks one (the secret was deleted
since) or an Attempt already ended: no more of its output leaves the Worker (log output.unmaskable, the run id
only), and the completion still goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from qinglong.wire import (
    ActivationRequest,
    CompletionRequest,
    LeaseControlRequest,
    LeaseControlResponse,
    OutputAppended,
    OutputAppendRequest,
    OutputLostRequest,
)
from qinglong.wire.codec import UNKNOWN_FIELD
from qinglong.wire.logline import emit
from qinglong.wire.output import CHUNK_MAX_BYTES, STREAMS, Stream
from qinglong.wire.reasons import KILLED_AFTER_GRACE
from qinglong.worker.client import (
    ClientError,
    IngressClient,
    Refused,
    Session,
    TransportError,
    Unauthenticated,
)
from qinglong.worker.controller import LocalProcessController
from qinglong.worker.delivery import UNMASKABLE, SecretValues, missing
from qinglong.worker.executor import Executor
from qinglong.worker.identity import ProcessHandle, boottime_ns
from qinglong.worker.inbox import Inbox, save
from qinglong.worker.journal import LEASE_LOST, TERMINAL_STATES, Journal, Record, State
from qinglong.worker.masking import MIN_MASKED_BYTES, Masker
from qinglong.worker.retention import kill_at

log = logging.getLogger("qinglong.worker")

MIN_CALL_S: Final = 0.5  # the shortest budget a lease-control or output call is given near the local expiry
DRAIN_STALLS: Final = 3  # drains in a row that got no byte through: the completion then goes without the rest
MASK_READ_BYTES: Final = 4 * 2**20  # raw bytes one append call reads and masks at most (about 0.03-0.2 s)
_READ_STEP: Final = 2**20
SUPERVISED: Final[frozenset[State]] = frozenset({"started", "running_acknowledged", "completion_pending"})
LOST_OUTPUT: Final = "output_lost:"  # journal meta: a lease-lost record's streams not yet all stored or said lost
LOST_PAGE: Final = 4  # lease-lost records whose output one tick handles at most
LOST_CHUNKS: Final = 8  # appends per stream one tick sends for them at most


@dataclass(frozen=True)
class Shipped:
    """Where a stream stands in the database (its last append's answer)."""

    next_offset: int
    head_bytes: int
    tail_bytes: int


def next_chunk(size: int, shipped: Shipped | None, limit: int = CHUNK_MAX_BYTES) -> tuple[int, int] | None:
    """(offset, length) of the next append of a stream whose file holds `size` bytes, or None when
    nothing is left to send. Not yet answered: from 0. Once the database holds the head and more than
    the tail is unsent: from size - tailBytes, the bytes between are dropped."""
    start = 0
    if shipped is not None:
        start = shipped.next_offset
        if start >= shipped.head_bytes and size - start > shipped.tail_bytes:
            start = size - shipped.tail_bytes
    if size <= start:
        return None
    return start, min(limit, size - start)


class Cursor:
    """Where one output stream stands (see the module docstring): raw bytes read through a Masker, masked bytes
    pending from masked offset `base`, and the database's last answer `shipped` (masked offsets). Without a
    pattern to mask (`masker` None) masked and raw are the same bytes and nothing is held: `plan` reads only
    what it sends."""

    def __init__(self, values: tuple[bytes, ...]) -> None:
        # A value shorter than MIN_MASKED_BYTES is never masked: with no other value the stream ships raw.
        self.masker = Masker(values) if any(len(v) >= MIN_MASKED_BYTES for v in values) else None
        self.raw_read = 0
        self.base = 0
        self.pending = bytearray()
        self.flushed = False
        self.shipped: Shipped | None = None

    @property
    def masked_size(self) -> int:
        """The masked bytes made so far."""
        return self.base + len(self.pending)

    def _tail_mode(self) -> bool:
        return self.shipped is not None and self.shipped.next_offset >= self.shipped.head_bytes

    def _trim(self) -> None:
        """Drop the pending bytes that will never be sent: below nextOffset, and (once the head is held) below
        masked size - tailBytes, since the masked size only grows."""
        if self.shipped is None:
            return
        keep = self.shipped.next_offset
        if self._tail_mode():
            keep = max(keep, self.masked_size - self.shipped.tail_bytes)
        drop = min(max(0, keep - self.base), len(self.pending))
        if drop:
            del self.pending[:drop]
            self.base += drop

    def advance(self, size: int, final: bool, read: Callable[[int, int], tuple[int, bytes]], limit: int) -> bool:
        """Read and mask more of the file, below `size` and at most MASK_READ_BYTES; before the head is held only
        until a whole chunk is pending; with `final` (the task has ended), flush the Masker once the file is read
        up to `size`. Whether anything changed."""
        if self.masker is None or self.flushed:
            return False
        changed = False
        budget = MASK_READ_BYTES
        while self.raw_read < size and budget > 0 and (self._tail_mode() or len(self.pending) < limit):
            start, data = read(self.raw_read, min(_READ_STEP, size - self.raw_read, budget))
            if not data:
                break
            if start > self.raw_read:
                if not self._cut(start):
                    break
                changed = True
                continue
            self.raw_read += len(data)
            budget -= len(data)
            self.pending += self.masker.feed(data)
            self._trim()
            changed = True
        if final and self.raw_read >= size:
            self.pending += self.masker.flush()
            self.flushed = True
            self._trim()
            changed = True
        return changed

    def _cut(self, start: int) -> bool:
        """The spool dropped the raw bytes up to `start` (the task wrote faster than they were shipped): go on
        from there, the Masker cut (Masker.cut: neither the start nor the rest of a secret the cut split is ever
        sent). The masked stream goes on from the database's nextOffset where that is further on (after a restart
        the bytes before the cut are fewer than they were): bytes may repeat there, none is sent below an offset
        already held.
        False: not yet, the database's nextOffset must be known first (the pending bytes are sent before)."""
        assert self.masker is not None
        if self.shipped is None and self.pending:
            return False
        if not self.pending and self.shipped is not None:
            self.base = max(self.base, self.shipped.next_offset)
        self.pending += self.masker.cut()
        self.raw_read = start
        return True

    def plan(self, size: int, read: Callable[[int, int], tuple[int, bytes]], limit: int) -> tuple[int, bytes] | None:
        """The next append's (masked offset, data), or None when nothing is ready to send. `size`: the raw file's
        size (used only without a Masker, where raw is masked; bytes the spool dropped are skipped, which the
        database takes once it holds the head)."""
        if self.masker is None:
            planned = next_chunk(size, self.shipped, limit)
            if planned is None:
                return None
            start, data = read(*planned)
            return (start, data) if data else None
        planned = next_chunk(self.masked_size, self.shipped, limit)
        if planned is None:
            return None
        offset, length = planned
        assert offset >= self.base, (offset, self.base)  # _trim keeps every byte next_chunk can plan
        start = offset - self.base
        return offset, bytes(self.pending[start : start + length])

    def answered(self, answer: OutputAppended) -> None:
        self.shipped = Shipped(answer.next_offset, answer.head_bytes, answer.tail_bytes)
        self._trim()

    def holds_all(self, size: int) -> bool:
        """The database acknowledged every byte of a stream whose file holds `size` raw bytes (but the ones skipped
        to keep only its tail): nothing of it is held back unmasked, pending or unread."""
        if self.shipped is None:
            return False
        if self.masker is None:
            return self.shipped.next_offset >= size
        return (
            self.raw_read >= size
            and self.masker.held == 0
            and not self.pending
            and self.shipped.next_offset >= self.masked_size
        )


async def renew(
    client: IngressClient, session: Session, inbox: Inbox, *, running: bool = False
) -> tuple[LeaseControlResponse, Inbox]:
    """One lease-control call for the record's Attempt, bounded by the local Lease left: the answer, and the
    inbox as it leaves the Lease (renewed | stop_requested: the new version and local expiry, counted from the
    send instant; terminal: unchanged). `running`: the call also acknowledges that the process exists (decision
    0031); a shell of the previous release refuses the field (wire.unknown_field), and then gets the running ACK of
    its own before the plain renewal. Raises what the client raises."""
    fence = inbox.fence(session.generation)
    body = LeaseControlRequest(
        **fence, offer_id=inbox.offer_id, expected_version=inbox.lease_version, running=True if running else None
    )
    left = inbox.lease_left_s()
    sent_at = boottime_ns()
    try:
        answer = await client.lease_control(session, body, timeout_s=None if left is None else max(MIN_CALL_S, left))
    except Refused as refused:
        if not running or refused.code != UNKNOWN_FIELD:
            raise
        await client.activate(session, inbox.offer_id, "running", ActivationRequest(**fence))
        return await renew(client, session, inbox)
    if answer.status == "terminal":
        return answer, inbox
    return answer, inbox.granted(answer.lease_version, sent_at, answer.expires_at_ms - answer.renewed_at_ms)


class Coordinator:
    def __init__(
        self,
        journal: Journal,
        client: IngressClient,
        executor: Executor,
        controller: LocalProcessController,
        values: SecretValues | None = None,
    ) -> None:
        self._journal = journal
        self._client = client
        self._executor = executor
        self._controller = controller
        self._values = values if values is not None else SecretValues()
        self._inflight: dict[str, asyncio.Task[Record | None]] = {}
        self._cursors: dict[str, dict[Stream, Cursor]] = {}  # per offer, per stream: where it stands
        self._stalls: dict[str, int] = {}  # per offer: drains in a row that ended without moving a stream on
        # A lease-control call was refused for its session (expired, replaced: the control plane answered): the
        # lifecycle reopens the session at once instead of after its backoff, which may outlast the Lease left.
        self.session_refused = False

    async def reconcile(self, offer_id: str, session: Session | None) -> Record | None:
        """Reconcile one record; concurrent calls for the same offer share one run."""
        task = self._inflight.get(offer_id)
        if task is None:
            task = asyncio.ensure_future(self._reconcile(offer_id, session))
            self._inflight[offer_id] = task
            task.add_done_callback(lambda done: self._finished(offer_id, done))
        return await asyncio.shield(task)

    def _finished(self, offer_id: str, task: asyncio.Task[Record | None]) -> None:
        self._inflight.pop(offer_id, None)
        record = None if task.cancelled() or task.exception() is not None else task.result()
        if record is None or record.state not in SUPERVISED:
            self._cursors.pop(offer_id, None)  # ended (or to be re-learned from the database)
            self._stalls.pop(offer_id, None)
        if record is not None and record.state not in SUPERVISED:
            self._values.forget(offer_id)  # ended: its values leave this process's memory too

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
        record = await self._lease_control(record, inbox, handle, session)
        renewed = Inbox.from_data(record.data)
        if record.state in SUPERVISED and renewed.lease_version != inbox.lease_version:
            await self._ship(renewed, handle, session, acknowledged=record.state == "running_acknowledged")
        return record

    async def _stop_lease_lost(self, record: Record, inbox: Inbox, handle: ProcessHandle) -> Record:
        outcome = await self._controller.stop(handle)
        # What each stream holds now that the database may not, kept before the record ends: report_lost_output
        # ships or reports it later. A stream the database acknowledged in full is not kept.
        cursors = self._cursors.get(record.offer_id, {})
        written = {
            stream: size
            for stream in STREAMS
            if (size := self._executor.output_size(handle, stream))
            and not ((cursor := cursors.get(stream)) is not None and cursor.holds_all(size))
        }
        if written:
            self._journal.set_meta(LOST_OUTPUT + record.offer_id, json.dumps(written))
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
            killed = status is None or status.signal == signal.SIGKILL
            if error is not None and killed and inbox.error_code == KILLED_AFTER_GRACE:
                error = KILLED_AFTER_GRACE  # journaled by the stop that KILLed it (_stop_requested)
            record = self._save(record, "completion_pending", inbox.replace(exit_code=exit_code, error_code=error))
            inbox = Inbox.from_data(record.data)
            kill_at("completion_pending")
        if not await self._drain(inbox, handle, session):
            return record, False  # no answer, or half the Lease left spent: renew, the next tick drains on
        try:
            done = await self._client.complete(
                session,
                inbox.offer_id,
                CompletionRequest(
                    **inbox.fence(session.generation),
                    lease_version=inbox.lease_version,
                    exit_code=inbox.exit_code,
                    error_code=inbox.error_code,
                    artifacts=(),
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
        try:
            answer, renewed = await renew(self._client, session, inbox, running=record.state == "started")
        except (TransportError, Unauthenticated) as failed:
            self.session_refused = self.session_refused or isinstance(failed, Unauthenticated)
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
        # persist before acting (decision 0000 (ADR-0118 §4 item 4)); a started record's renewal took the running ACK
        state: State = "running_acknowledged" if record.state == "started" else record.state
        record = self._save(record, state, renewed)
        if renewed.lease_expires_boottime_ns is not None:
            with contextlib.suppress(OSError):  # unwritten, the old expiry stops the task early, never late
                self._executor.extend_lease(handle, renewed.lease_expires_boottime_ns)
        if answer.status == "stop_requested":
            record = await self._stop_requested(record, handle)
        return record

    async def _stop_requested(self, record: Record, handle: ProcessHandle) -> Record:
        """Stop the task (TERM, the grace, KILL). A task still running when the grace is over is KILLed, and that
        is journaled first (errorCode process.killed_after_grace on the record): its completion then says it was
        killed after ignoring its stop signal, not that it vanished or was killed by someone, also after a
        restart. Returns the record as last saved."""
        latest = [record]

        def escalating() -> None:
            inbox = Inbox.from_data(latest[0].data)
            latest[0] = self._save(latest[0], latest[0].state, inbox.replace(error_code=KILLED_AFTER_GRACE))
            emit(log, logging.WARNING, "task.killed_after_grace", offer=inbox.offer_id, run=inbox.offer.offer.run_id)

        await self._controller.stop(handle, before_kill=escalating)
        return latest[0]

    async def _masking(self, inbox: Inbox, session: Session, *, acknowledged: bool = False) -> tuple[bytes, ...] | None:
        """The values to mask the Attempt's output with (none when its plan names no secret), or None when no
        more of its output may leave the Worker. After a restart the values are had again by replaying the
        starting ACK, once the running ACK is known to have applied (`acknowledged`: the record is
        running_acknowledged, or its snapshot says running; else the running ACK is sent first), so the replay
        answers already_running and can neither start nor end the Attempt. Raises what the client raises (nothing
        is decided then)."""
        plan = inbox.offer.offer.plan
        if not plan.secret_names():
            return ()
        known = self._values.get(inbox.offer_id)
        if known == UNMASKABLE:
            return None
        if known is not None:
            return known
        fence = ActivationRequest(**inbox.fence(session.generation))
        if not acknowledged and (inbox.snapshot is None or inbox.snapshot.get("attemptStatus") != "running"):
            ack = await self._client.activate(session, inbox.offer_id, "running", fence)  # the process exists
            if ack.status not in ("applied", "already_running"):
                self._unmaskable(inbox)  # ended: no more output would be taken anyway
                return None
        ack = await self._client.activate(session, inbox.offer_id, "starting", fence)
        if ack.status != "already_running" or missing(plan, ack.secrets):
            self._unmaskable(inbox)
            return None
        values = tuple(s.value for s in ack.secrets or ())
        self._values.put(inbox.offer_id, values)
        return values

    def _unmaskable(self, inbox: Inbox) -> None:
        self._values.unmaskable(inbox.offer_id)
        emit(log, logging.WARNING, "output.unmaskable", run_id=inbox.offer.offer.run_id)

    async def _append(
        self,
        inbox: Inbox,
        handle: ProcessHandle,
        session: Session,
        stream: Stream,
        size: int,
        timeout_s: float | None,
        values: tuple[bytes, ...],
        *,
        final: bool = False,
    ) -> bool:
        """Mask more of `stream` below `size` and send its next chunk, if any; whether it moved on (the
        database's nextOffset moved, or more of the file was masked)."""
        streams = self._cursors.setdefault(inbox.offer_id, {})
        cursor = streams.get(stream)
        if cursor is None:
            cursor = streams[stream] = Cursor(values)

        def read(offset: int, n: int) -> tuple[int, bytes]:
            return self._executor.read_output(handle, stream, offset, n)

        masked = cursor.advance(size, final, read, CHUNK_MAX_BYTES)
        planned = cursor.plan(size, read, CHUNK_MAX_BYTES)
        if planned is None or not planned[1]:
            return masked
        offset, data = planned
        body = OutputAppendRequest(**inbox.fence(session.generation), stream=stream, offset=offset, data=data)
        try:
            answer = await self._client.append_output(session, inbox.offer_id, body, timeout_s=timeout_s)
        except Refused:
            streams.pop(stream, None)  # e.g. caps changed under a skip: the next append starts from 0 and learns
            raise
        before = cursor.shipped
        cursor.answered(answer)
        return masked or before is None or answer.next_offset > before.next_offset

    async def _ship(self, inbox: Inbox, handle: ProcessHandle, session: Session, *, acknowledged: bool) -> None:
        """A running task's tick: at most one chunk per stream; failures are isolated."""
        left = inbox.lease_left_s()
        timeout_s = None if left is None else max(MIN_CALL_S, left / 4)
        try:
            values = await self._masking(inbox, session, acknowledged=acknowledged)
        except ClientError:
            return  # no answer, or refused: the lease path decides; nothing leaves unmasked
        if values is None:
            return
        for stream in STREAMS:
            size = self._executor.output_size(handle, stream)
            try:
                await self._append(inbox, handle, session, stream, size, timeout_s, values)
            except (TransportError, Unauthenticated):
                return  # no answer: the other stream waits for the next tick too
            except ClientError:
                continue  # refused or outside the contract: the lease path decides

    async def _drain(self, inbox: Inbox, handle: ProcessHandle, session: Session) -> bool:
        """Before the completion: every stream up to the size its file has now (a straggler of the
        task's group may still write; what it adds later is not waited for), the Masker flushed at that size.
        Each append moves the stream on (nextOffset, or more of the file masked) or ends the loop, so it is
        bounded by the bytes to read and send. False: no answer
        (the next tick goes on). A refusal or a 5xx the shell answered ends the drain: output never holds
        the Run's end hostage (a control plane without the output route, or failing on it, still gets the
        completion, which decides; if the completion fails too, the next tick drains again from where the
        database is). So does output that cannot be masked (the values cannot be had: none of it is sent).
        Nor does it starve the Lease: each append is bounded by a quarter of the local Lease
        left, and once half of what was left when the drain began is spent it stops (False) so that this
        reconcile renews; the next tick drains on. Nor does a link that carries renewals but never an append
        (a chunk too large for its rate) keep the Run from ending: after DRAIN_STALLS drains in a row that
        got no byte through, the completion goes without the rest of the output (log output.drain_abandoned)."""
        started = inbox.lease_left_s()
        moved = False
        try:
            values = await self._masking(inbox, session)
        except Unauthenticated:
            return False
        except TransportError as failed:
            return failed.status is not None or self._stalled(inbox.offer_id, moved)
        except ClientError:
            return True
        if values is None:
            return True
        for stream in STREAMS:
            size = self._executor.output_size(handle, stream)
            try:
                while True:
                    left = inbox.lease_left_s()
                    # (a Lease already expired locally, started <= 0: the completion still goes, it decides)
                    if started is not None and started > 0 and (left is None or left < started / 2):
                        return self._stalled(inbox.offer_id, moved)
                    timeout_s = None if left is None else max(MIN_CALL_S, left / 4)
                    if not await self._append(inbox, handle, session, stream, size, timeout_s, values, final=True):
                        break
                    moved = True
            except Unauthenticated:
                return False
            except TransportError as failed:
                return failed.status is not None or self._stalled(inbox.offer_id, moved)
            except ClientError:
                return True
        return True

    async def report_lost_output(self, session: Session) -> None:
        """For up to LOST_PAGE lease-lost records with output not yet stored nor said lost: per stream, send what
        the database still takes (at most LOST_CHUNKS appends a tick), else record it lost (output_lost). Without
        an answer it tries again next tick; a record done with both streams leaves the meta."""
        for key, value in self._journal.meta_page(LOST_OUTPUT, LOST_PAGE):
            offer_id = key[len(LOST_OUTPUT) :]
            record = self._journal.get(offer_id)
            if record is None or record.state not in LEASE_LOST:
                self._journal.set_meta(key, None)  # not (or no longer) a lost Lease's record
                continue
            written: dict[Stream, int] = json.loads(value)
            try:
                left = await self._lost_streams(record, session, written)
            except (TransportError, Unauthenticated):
                continue  # no answer: next tick
            if left:
                self._journal.set_meta(key, json.dumps(left))
            else:
                self._journal.set_meta(key, None)
                self._cursors.pop(offer_id, None)

    async def _lost_streams(self, record: Record, session: Session, written: dict[Stream, int]) -> dict[Stream, int]:
        """Ship or report each stream of `written`; the streams left for the next tick. Raises TransportError or
        Unauthenticated (nothing decided)."""
        inbox = Inbox.from_data(record.data)
        assert inbox.handle is not None
        handle = ProcessHandle.from_dict(inbox.handle)
        try:
            values = await self._masking(inbox, session)
        except (TransportError, Unauthenticated):
            raise
        except ClientError:
            values = None  # the Attempt ended: its values cannot be had again, so none of its output may leave
        left: dict[Stream, int] = {}
        for stream, size in written.items():
            shipped = False
            if values is not None and self._executor.output_size(handle, stream) >= size:
                try:
                    for _ in range(LOST_CHUNKS):
                        if not await self._append(inbox, handle, session, stream, size, None, values, final=True):
                            shipped = True  # nothing more to send: the database holds the stream
                            break
                    else:
                        left[stream] = size  # more next tick
                        continue
                except (TransportError, Unauthenticated):
                    raise
                except ClientError:
                    pass  # refused: the database no longer takes it
            if not shipped:
                await self._report_lost(inbox, session, stream, size)
        return left

    async def _report_lost(self, inbox: Inbox, session: Session, stream: Stream, size: int) -> None:
        run_id = inbox.offer.offer.run_id
        body = OutputLostRequest(**inbox.fence(session.generation), stream=stream, written_bytes=size)
        try:
            answer = await self._client.output_lost(session, inbox.offer_id, body)
        except (TransportError, Unauthenticated):
            raise
        except ClientError as refused:  # even that is refused: the log is where it is said
            emit(log, logging.WARNING, "output.lost_unrecorded", run_id=run_id, stream=stream, written_bytes=size,
                 reason=str(refused))  # fmt: skip
            return
        emit(log, logging.WARNING, "output.lost", run_id=run_id, stream=stream, written_bytes=answer.written_bytes,
             stored_bytes=answer.stored_bytes)  # fmt: skip

    def _stalled(self, offer_id: str, moved: bool) -> bool:
        """A drain ended without an answer: whether the completion goes anyway (DRAIN_STALLS in a row moved
        nothing), else False (renew; the next tick drains on)."""
        if moved:
            self._stalls.pop(offer_id, None)
            return False
        stalls = self._stalls[offer_id] = self._stalls.get(offer_id, 0) + 1
        if stalls < DRAIN_STALLS:
            return False
        emit(log, logging.WARNING, "output.drain_abandoned", offer_id=offer_id, drains=stalls)
        return True
