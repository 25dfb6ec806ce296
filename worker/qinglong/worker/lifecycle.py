"""Lifecycle: the Worker's explicit, timer-free lifecycle (decision 0000 (ADR-0112 §3,
ADR-0118 §5)). Touches the journal (ownership, paging), the control plane and local processes only
through the Processor, the coordinator and the one client it is given.

- Nothing at import or construction: no lock, socket, task or timer.
- start(): take exclusive journal ownership, open a session, page the whole journal (≤ 64 a page)
  through the Processor and coordinator BEFORE any pull (an ended record whose secret files a fault
  kept gets them removed again, inbox.sweep); a `recovery_required` record, found or produced, fails the
  lifecycle closed: it never pulls again. The Processor and the coordinator share one SecretValues: the
  secret values of the Attempts this process spawned, in memory only. Then, with a `retention`, one
  retention pass (retention.py), so a restart finishes the clean-up an earlier process began.
- tick(): fail closed (renew and pull nothing) once the journal file was deleted or replaced under
  it; else heartbeat the session (or open a new one when the shell asked it to re-key; backing off,
  jittered, while unreachable), supervise ≤ page_size
  records WITH WORK LEFT from a stable cursor (ended records cost a tick nothing, so every active
  record is supervised every tick while capacity ≤ page_size), re-check the abort signal, then pull
  ≤ 1 offer when capacity allows and no lease loss, control-plane terminal or recovery fact appeared
  in this tick; with a `retention`, a retention pass runs (in a thread) after the supervision and before the
  pull; with a `disk` budget (disk.py), it is measured (in a thread) next, and below it nothing is pulled.
  Concurrent ticks coalesce into one.
- stop(): mark stopping, abort an in-flight pull, await in-flight work, then release ownership.
One outer cadence (the `run` command) calls tick(); the lifecycle owns no timer.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import random
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Final

from qinglong.wire import OfferOffered
from qinglong.wire.logline import emit
from qinglong.worker.bundles import BUNDLE_CACHE_BYTES, BundleCache
from qinglong.worker.client import (
    ClientError,
    IngressClient,
    Refused,
    Session,
    TransportError,
    Unauthenticated,
)
from qinglong.worker.controller import LocalProcessController
from qinglong.worker.coordinator import SUPERVISED, Coordinator
from qinglong.worker.delivery import SecretValues
from qinglong.worker.disk import DiskBudget
from qinglong.worker.executor import Executor
from qinglong.worker.identity import boottime_ns
from qinglong.worker.inbox import Inbox, sweep
from qinglong.worker.journal import DuplicateOffer, Journal, Record, State
from qinglong.worker.processor import Processor
from qinglong.worker.retention import Retention, Sweeper
from qinglong.worker.trust import PlanTrust

log = logging.getLogger("qinglong.worker")

STARTUP_PAGE: Final = 64
BACKOFF_MIN_S: Final = 1.0
BACKOFF_MAX_S: Final = 30.0
PENDING_PULL: Final = "pending_pull"  # journal meta key: the id of a pull sent but not answered
CONTINUABLE: Final[frozenset[State]] = frozenset({"accepted", "starting_acknowledged", "launching", "start_failed"})
ACTIVE: Final[frozenset[State]] = CONTINUABLE | {"started", "running_acknowledged", "completion_pending"}
STOP_FACTS: Final[frozenset[State]] = frozenset(
    {"recovery_required", "control_plane_terminal", "lease_lost_local_execution_stopped",
     "lease_lost_local_execution_unverified"}
)  # fmt: skip


class Lifecycle:
    def __init__(
        self,
        *,
        journal_path: Path,
        client: IngressClient,
        executor: Executor,
        controller: LocalProcessController,
        generation: int,
        capacity: int,
        page_size: int = 16,
        open_journal: Callable[[Path], Journal] = Journal.open,
        bundles: BundleCache | None = None,
        trust: PlanTrust | None = None,
        retention: Retention | None = None,  # None: nothing ended is ever removed (the run command passes one)
        disk: DiskBudget | None = None,  # None: pull whatever the disk holds (the run command passes one)
    ) -> None:
        if not 1 <= page_size <= 64:
            raise ValueError("page_size is 1..64")
        self._journal_path = journal_path
        self._client = client
        self._executor = executor
        self._controller = controller
        self._generation = generation
        self._capacity = capacity
        self._page_size = page_size
        self._open_journal = open_journal
        self._bundles = bundles or BundleCache(executor.work_dir / "bundles", BUNDLE_CACHE_BYTES)
        self._trust = trust or PlanTrust()
        self._retention = retention
        self.disk = disk
        self._sweeper: Sweeper | None = None
        self._journal: Journal | None = None
        self._session: Session | None = None
        self._processor: Processor | None = None
        self._coordinator: Coordinator | None = None
        self._cursor: int | None = None
        self._tick: asyncio.Task[None] | None = None
        self._pull: asyncio.Task[object] | None = None
        self._stopping = False
        self.failed_closed = False
        # The code of a session-open refusal only an operator can fix (wrong generation, certificate,
        # unknown or disabled Worker): the lifecycle does nothing more and `run` exits with it.
        self.refused: str | None = None
        self._backoff_s = 0.0  # after a transport failure of the session calls: skip them until _retry_at
        self._retry_at = 0.0
        self._lost_at: float | None = None  # when the session calls began failing in transport (one log line)
        self.scanned = False  # start() paged the whole journal
        self.pulls = 0  # observable for tests and metrics
        # The last successful session open or heartbeat (wall-clock ms) and its session (the status file).
        self.last_contact_ms: int | None = None
        self.last_session_id: str | None = None
        # The last steps taken (own, scanned, supervise, pull, abort, wait, release), bounded.
        self.events: collections.deque[str] = collections.deque(maxlen=64)

    @property
    def started(self) -> bool:
        return self._journal is not None

    async def start(self) -> None:
        if self._journal is not None:
            return
        self._journal = journal = self._open_journal(self._journal_path)
        self.events.append("own")
        values = SecretValues()
        self._processor = Processor(
            journal, self._client, self._executor, values, bundles=self._bundles, trust=self._trust
        )
        self._coordinator = Coordinator(journal, self._client, self._executor, self._controller, values)
        with contextlib.suppress(ClientError):  # a refusal is kept in self.refused; the scan goes on
            await self._ensure_session()
        cursor: int | None = None
        while True:  # the whole journal, page by page, before the first pull
            page = journal.page(cursor, STARTUP_PAGE)
            for record in page:
                sweep(record)
                await self._supervise(record)
            if len(page) < STARTUP_PAGE:
                break
            cursor = page[-1].seq
        self.failed_closed = self.failed_closed or journal.count(states=["recovery_required"]) > 0
        if self._retention is not None:
            self._sweeper = Sweeper(journal, self._executor.work_dir, self._controller, self._retention)
            await asyncio.to_thread(self._sweeper.sweep)
        self.events.append("scanned")
        self.scanned = True

    async def _ensure_session(self) -> Session:
        if self._session is None:
            try:
                self._session = await self._client.open_session(capacity=self._capacity, generation=self._generation)
            except Refused as refused:
                self.refused = refused.code
                emit(log, logging.ERROR, "worker.refused", code=refused.code, status=refused.status)
                raise
            self._contact(self._session)
        return self._session

    def _contact(self, session: Session) -> None:
        self.last_contact_ms, self.last_session_id = time.time_ns() // 1_000_000, session.session_id

    async def _supervise(self, record: Record) -> Record | None:
        assert self._processor is not None and self._coordinator is not None
        if record.state in CONTINUABLE and self._session is not None:
            record = await self._processor.process(record, self._session)
        if record.state in SUPERVISED:
            reconciled = await self._coordinator.reconcile(record.offer_id, self._session)
            record = reconciled if reconciled is not None else record
        if record.state == "recovery_required":
            self.failed_closed = True
        return record

    async def tick(self) -> None:
        """One bounded step of work; concurrent calls share the same step."""
        if self._journal is None or self._stopping:
            return
        if self._tick is None or self._tick.done():
            self._tick = asyncio.ensure_future(self._run_tick())
        await asyncio.shield(self._tick)

    async def _heartbeat(self) -> None:
        try:
            if self._session is None:
                await self._ensure_session()
            elif self._client.rekey_wanted == self._session.session_id:
                # Keyed under a secret the shell is retiring: a new session replaces this one. Until it has
                # opened, this one stays (the shell still accepts it).
                self._session = await self._client.open_session(capacity=self._capacity, generation=self._generation)
                self._contact(self._session)
                emit(log, logging.INFO, "worker.rekeyed", session_id=self._session.session_id)
            else:
                await self._client.heartbeat(self._session)
                self._contact(self._session)
        except Refused:
            self._session = None  # expired or replaced: open a new one next time
            await self._ensure_session()

    def _replaced(self, journal: Journal) -> bool:
        """The journal was replaced under this Worker: writes would no longer reach what a restart reads, so it
        fails closed (renews nothing, pulls nothing; every task stops at its local expiry, the runner's switch, and
        the database recovers it). Logged once."""
        if not journal.replaced():
            return False
        if not self.failed_closed:
            emit(log, logging.ERROR, "journal.replaced", journal=str(journal.path))
        self.failed_closed = True
        return True

    async def _run_tick(self) -> None:
        journal = self._journal
        assert journal is not None
        if self._replaced(journal):
            return
        now = time.monotonic()
        if self.refused is not None:
            return
        if now >= self._retry_at:
            try:
                await self._heartbeat()
                self._backoff_s = 0.0
                if self._lost_at is not None:
                    emit(log, logging.WARNING, "control_plane.regained", origin=self._client.origin,
                         outage_s=round(time.monotonic() - self._lost_at, 1))  # fmt: skip
                    self._lost_at = None
            except TransportError:
                if self._lost_at is None:  # once per outage; call.transport_failed says each failure's kind
                    self._lost_at = now
                    emit(log, logging.WARNING, "control_plane.lost", origin=self._client.origin)
                # Back off the session calls (jittered, doubling, ≤ 30 s); supervision below goes on,
                # and every lease-control call is still bounded by its local Lease.
                self._backoff_s = min(BACKOFF_MAX_S, max(BACKOFF_MIN_S, self._backoff_s * 2))
                self._retry_at = now + self._backoff_s * random.uniform(0.5, 1.0)  # noqa: S311 - jitter
            except ClientError:
                self._session = None
        backing_off = now < self._retry_at
        stop_fact = False
        # Only records with work left: ended ones never delay a renewal, however many the journal keeps.
        page = journal.page(self._cursor, self._page_size, states=ACTIVE)
        for record in page:
            after = await self._supervise(record)
            if after is not None and after.state in STOP_FACTS and after.revision != record.revision:
                stop_fact = True
        self._cursor = page[-1].seq if len(page) == self._page_size else None
        self.events.append("supervise")
        assert self._coordinator is not None
        if self._coordinator.session_refused:
            # A renewal was refused for its session (it expired in an outage): the control plane is back. Reopen
            # now, not after the backoff, so that the next tick renews while the Lease still holds (decision 0028).
            self._coordinator.session_refused = False
            self._session, self._retry_at, self._backoff_s = None, 0.0, 0.0
            backing_off = False
            with contextlib.suppress(ClientError):  # a refusal is kept in self.refused, as for any session open
                await self._ensure_session()
        if self._session is not None and not backing_off:
            # Output that lost Leases left behind: shipped while the database takes it, else said to be lost there.
            await self._coordinator.report_lost_output(self._session)
        if self._sweeper is not None:
            await asyncio.to_thread(self._sweeper.sweep)
        if self.disk is not None and not await asyncio.to_thread(self.disk.check):
            return
        if self._stopping or self.failed_closed or stop_fact or self._session is None or backing_off:
            return
        if journal.count(states=ACTIVE) >= self._capacity:
            return
        if self._replaced(journal):  # since the tick began (supervision takes a while): claim nothing to lose
            return
        # The pull's id is durable before it is sent: a pull whose answer was lost is replayed with the
        # same id and gets the same offer (or `pull_spent`), never a second claim.
        pull_id = journal.meta(PENDING_PULL)
        if pull_id is None:
            pull_id = str(uuid.uuid4())
            journal.set_meta(PENDING_PULL, pull_id)
        sent_at = boottime_ns()  # the first local Lease expiry counts from the pull's send instant
        self._pull = asyncio.ensure_future(self._client.pull(self._session, pull_id))
        try:
            offered = await self._pull
        except (asyncio.CancelledError, TransportError, Unauthenticated):
            return  # no answer (or a session to reopen): the next pull replays this id
        except ClientError:
            journal.set_meta(PENDING_PULL, None)  # a decision: this id is spent
            return
        finally:
            self._pull = None
        self.pulls += 1
        self.events.append("pull")
        if not isinstance(offered, OfferOffered):
            journal.set_meta(PENDING_PULL, None)
        elif not self._stopping:  # stopping: keep the id, so the next start replays it and takes the offer
            inbox = Inbox.accepted(offered, self._session.session_id, sent_at)
            with contextlib.suppress(DuplicateOffer):  # journaled before a crash that kept the id
                journal.insert(offered.offer.offer_id, "accepted", inbox.to_data())
            journal.set_meta(PENDING_PULL, None)
            accepted = journal.get(offered.offer.offer_id)
            if accepted is not None:
                await self._supervise(accepted)

    async def stop(self) -> None:
        """Abort the in-flight pull, wait for in-flight work, then release journal ownership."""
        self._stopping = True
        if self._pull is not None and not self._pull.done():
            self._pull.cancel()
            self.events.append("abort")
        if self._tick is not None:
            await asyncio.wait({self._tick})  # its outcome (even a journal error) went to whoever awaited it
        self.events.append("wait")
        await self._client.close()
        if self._journal is not None:
            self._journal.close()
            self._journal = None
            self.events.append("release")
