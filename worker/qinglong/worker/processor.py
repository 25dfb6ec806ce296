"""The Processor: drives one inbox record from `accepted` to a started process
(decision 0000 (ADR-0112 §3, ADR-0118 §3)). Touches the journal (compare-and-set), the control plane (through the
one client) and the local process table (through the Executor).

accepted → starting ACK → two-way deadline rule (plan has timeoutMs ⇔ snapshot has deadlineAtMs)
→ persist `starting_acknowledged` → replay the starting ACK just before spawning → `launching`
(with a launch nonce) → spawn the runner wrapper in its own process group, its dead-man's switch set
to the local Lease expiry → `started` (durable handle). The coordinator, in the same tick, renews the Lease with the
running ACK taken along (decision 0031) → `running_acknowledged`.
A task is never spawned on a Lease that one lost answer would let expire: when less than half of the Lease
last granted is left at the spawn (a Worker back from a crash or a freeze between its pull and the spawn),
or none, the Processor renews it first and persists the renewal; with no process yet the database, not the
local expiry, decides (renewed, or fenced once it expired there too), and no answer means the next tick
tries again.
A starting ACK answered `not_started` (the Run carries a cancel intent, or a secret its plan names was
deleted; the database ended the Attempt) completes the record without a spawn.
Project secrets (delivery.py): a starting ACK that applied, and the replay just before spawning, must
deliver every secret the plan names, else the start fails `secret_unavailable` and nothing is spawned. The
values of the replay are the ones used: `secretEnv` into the task's environment, `secretFiles` written in the
Run's directory by the Executor (the files to be made are journaled with `launching`, their identities before
any value is written), and, once spawned, kept in memory (SecretValues) for the coordinator to mask the
task's output with. No value is ever journaled or logged.
Plans and bundles (trust.py, bundles.py): before the starting ACK, a plan this Worker may not run (unsigned
where signatures are required, or signed by a key it does not trust, or changed after signing) is a start
failure with the signature's code; a plan that names a bundle missing from the cache has it fetched first, a
chunk per call for at most FETCH_SLICE_S per pass (the tick goes on renewing the other Attempts), renewing this
Attempt's Lease when it runs short, and resuming from the chunks held after a lost answer or a restart; a
bundle whose digest does not match, that the control plane does not give (`bundle.unavailable`), or whose fetch
takes longer than the cache's fetch limit (`bundle.fetch_timeout`) is a start failure. At the spawn the bundle
is read from the cache (its digest checked again) and the Executor unpacks it into the Run's directory (a
bundle that breaks a rule is a start failure with its `bundle.*` code).
A start that cannot happen is reported with the start-failure ACK (a plan this Worker may not honour
— its user, group or cwd — is one: the Executor refuses it with a `plan.*` code before it creates
anything): its code, of the catalogue qinglong.wire.reasons (one it lacks goes as `start.failed`), and its
message (the Executor's words, else the catalogue's), journaled as the record's reason, so the `record.state`
log line says both; a shell of the previous release, which refuses the message (`wire.unknown_field`), gets
the ACK again with the code alone. Every step is persisted before
the next one acts, so a restart resumes here; a restart that finds `launching` decides from the
launch's evidence (launch.py) whether the task was never started, runs, or ran.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from typing import Final

from qinglong.wire import ActivationRequest, ActivationResponse, ActivationStartFailureRequest
from qinglong.wire.activation import Phase
from qinglong.wire.bundle import BundleError
from qinglong.wire.bundle_fetch import BundleChunkRequest
from qinglong.wire.codec import UNKNOWN_FIELD
from qinglong.wire.reasons import START_FAILED, start_failure
from qinglong.worker.bundles import CHUNK, FETCH_TIMEOUT, UNAVAILABLE, BundleCache
from qinglong.worker.client import (
    ClientError,
    IngressClient,
    Refused,
    Session,
    TransportError,
    Unauthenticated,
)
from qinglong.worker.coordinator import renew
from qinglong.worker.delivery import (
    SECRET_UNAVAILABLE,
    FileDelivery,
    SecretFile,
    SecretValues,
    by_name,
    missing,
    plan_files,
)
from qinglong.worker.executor import Executor, ExecutorRefused
from qinglong.worker.identity import boottime_ns
from qinglong.worker.inbox import Inbox, save
from qinglong.worker.journal import PAGE_LIMIT_MAX, Journal, Record, State
from qinglong.worker.launch import recover_launch
from qinglong.worker.trust import PlanTrust

FETCH_SLICE_S: Final = 1.0  # the longest a pass fetches before it lets the tick go on
UNFETCHED: Final[tuple[State, ...]] = ("accepted", "starting_acknowledged", "launching")  # bundles still needed


class Processor:
    def __init__(
        self,
        journal: Journal,
        client: IngressClient,
        executor: Executor,
        values: SecretValues | None = None,
        *,
        bundles: BundleCache,
        trust: PlanTrust,
    ) -> None:
        self._journal = journal
        self._client = client
        self._executor = executor
        self._values = values if values is not None else SecretValues()
        self._bundles = bundles
        self._trust = trust

    async def process(self, record: Record, session: Session) -> Record:
        """Advance one record as far as it can go now; return the record as persisted. Nothing moves on a
        journal deleted or replaced under this Worker (checked before every step): a restart would not find
        what it wrote, so it never starts a task there (the lifecycle fails closed at its next tick)."""
        for _ in range(6):  # each pass moves at most one state
            if self._journal.replaced():
                return record
            advanced = await self._step(record, session)
            if advanced is None:
                return record
            record = advanced
        return record

    def _save(self, record: Record, state: State, inbox: Inbox) -> Record:
        return save(self._journal, record, state, inbox)

    def _start_failed(self, record: Record, inbox: Inbox, code: str, message: str | None = None) -> Record:
        """Save a start failure: its code and, as the record's reason, its message (the Executor's or the
        catalogue's), which the start-failure ACK sends and the state change's log line shows."""
        code, message = start_failure(code, message)
        return self._save(record, "start_failed", inbox.replace(error_code=code, reason=message))

    async def _ack(self, session: Session, inbox: Inbox, phase: Phase) -> ActivationResponse:
        fence = inbox.fence(session.generation)
        if phase != "start-failure":
            return await self._client.activate(session, inbox.offer_id, phase, ActivationRequest(**fence))
        code, message = start_failure(inbox.error_code or START_FAILED, inbox.reason)
        body = ActivationStartFailureRequest(**fence, error_code=code, error_message=message)
        try:
            return await self._client.activate(session, inbox.offer_id, phase, body)
        except Refused as refused:
            if refused.code != UNKNOWN_FIELD:
                raise
        # A shell of the previous release takes no errorMessage: the code alone, as that release sent it.
        legacy = ActivationStartFailureRequest(**fence, error_code=code)
        return await self._client.activate(session, inbox.offer_id, phase, legacy)

    async def _step(self, record: Record, session: Session) -> Record | None:
        inbox = Inbox.from_data(record.data)
        try:
            if record.state == "accepted":
                return await self._starting(record, session, inbox)
            if record.state == "starting_acknowledged":
                return await self._launch(record, session, inbox)
            if record.state == "launching":
                return self._resume_launch(record, inbox)
            if record.state == "start_failed":
                ack = await self._ack(session, inbox, "start-failure")
                return self._save(record, "completed", inbox.replace(snapshot=ack.snapshot.to_obj()))
        except (TransportError, Unauthenticated):
            return None  # nothing is known to have happened: the next tick replays the same step
        except Refused as refused:
            if inbox.handle is not None:
                return None  # a process exists: the coordinator stops it before anything is isolated
            return self._save(record, "control_plane_terminal", inbox.replace(reason=refused.code))
        except ClientError as error:
            return self._save(record, "recovery_required", inbox.replace(reason=f"protocol: {error}"))
        return None

    def _not_started(self, record: Record, inbox: Inbox, ack: ActivationResponse) -> Record:
        # a cancel intent, or a secret the plan names was deleted (the Attempt's error: secret_unavailable)
        why = f"{ack.snapshot.cancel_reason} intent" if ack.snapshot.cancel_reason else ack.snapshot.error_code
        reason = f"not started: {why}"
        return self._save(record, "completed", inbox.replace(snapshot=ack.snapshot.to_obj(), reason=reason))

    async def _starting(self, record: Record, session: Session, inbox: Inbox) -> Record | None:
        refusal = self._trust.refusal(inbox.offer.offer)
        if refusal is not None:
            return self._start_failed(record, inbox, refusal)
        digest = inbox.offer.offer.plan.bundle
        if digest is not None and not self._bundles.has(digest):
            return await self._fetch(record, session, inbox, digest)
        ack = await self._ack(session, inbox, "starting")
        if ack.status == "not_started":
            return self._not_started(record, inbox, ack)
        if ack.status == "already_terminal":
            return self._save(record, "control_plane_terminal", inbox.replace(reason="already_terminal"))
        if ack.status == "already_running":
            return self._save(record, "recovery_required", inbox.replace(reason="running before this Worker spawned"))
        inbox = inbox.replace(snapshot=ack.snapshot.to_obj())
        if missing(inbox.offer.offer.plan, ack.secrets):
            return self._start_failed(record, inbox, SECRET_UNAVAILABLE)
        has_timeout = inbox.offer.offer.plan.timeout_ms is not None
        if has_timeout != (ack.snapshot.deadline_at_ms is not None):
            return self._start_failed(record, inbox, "deadline.one_sided")
        return self._save(record, "starting_acknowledged", inbox)

    async def _launch(self, record: Record, session: Session, inbox: Inbox) -> Record:
        ack = await self._ack(session, inbox, "starting")  # the replay just before spawn: the lease still holds
        if ack.status == "not_started":
            return self._not_started(record, inbox, ack)
        if ack.status != "already_starting":
            state: State = "control_plane_terminal" if ack.status == "already_terminal" else "recovery_required"
            return self._save(record, state, inbox.replace(reason=f"replay answered {ack.status}"))
        plan = inbox.offer.offer.plan
        if missing(plan, ack.secrets):  # e.g. deleted since the first answer: its version was destroyed
            return self._start_failed(record, inbox, SECRET_UNAVAILABLE)
        if inbox.short_of_lease():  # also when it expired locally: no process yet, so the database decides
            return await self._renew(record, session, inbox)
        nonce = secrets.token_hex(16)
        files = plan_files((plan.secret_files or {}).keys(), nonce)
        launching = inbox.replace(launch_nonce=nonce).with_files(files)  # the files to be made, before any is
        if files:
            store = self._executor.secret_store(nonce)
            launching = launching.replace(secret_dir=str(self._executor.run_dir(inbox.offer.offer.run_id)),
                                          secret_store=None if store is None else str(store))  # fmt: skip
        record = self._save(record, "launching", launching)
        return await self._spawn(record, Inbox.from_data(record.data), by_name(ack.secrets))

    async def _fetch(self, record: Record, session: Session, inbox: Inbox, digest: str) -> Record | None:
        """Fetch the plan's bundle for up to FETCH_SLICE_S: the record (renewed, or unchanged once the bundle is
        whole: the next pass goes on), a start failure, or None (more on the next tick)."""
        now = boottime_ns()
        if inbox.fetch_started_ns is None or inbox.fetch_started_ns > now:  # (a reboot: counted again)
            record = self._save(record, record.state, inbox := inbox.replace(fetch_started_ns=now))
        elif now - inbox.fetch_started_ns > self._bundles.fetch_limit_s * 1e9:
            return self._start_failed(record, inbox, FETCH_TIMEOUT)
        self._bundles.evict(self._pinned())
        until = time.monotonic() + FETCH_SLICE_S
        index = self._bundles.next_chunk(digest)
        while time.monotonic() < until:
            if inbox.short_of_lease():
                return await self._renew(record, session, inbox)
            body = BundleChunkRequest(**inbox.fence(session.generation), digest=digest, index=index)
            try:
                chunk = await self._client.bundle_chunk(session, inbox.offer_id, body)
                if (chunk.digest, chunk.index) != (digest, index):
                    raise BundleError(CHUNK, f"asked for chunk {index}, got {chunk.index} of another bundle")
                self._bundles.add_chunk(digest, index, chunk.data, chunk.chunk_count)
                if index + 1 == chunk.chunk_count:
                    self._bundles.seal(digest)
                    return record
            except Refused as refused:
                if refused.code != "not_found":
                    raise
                return self._start_failed(record, inbox, UNAVAILABLE)
            except BundleError as error:
                return self._start_failed(record, inbox, error.code, str(error))
            index += 1
        return None

    def _pinned(self) -> set[str]:
        """The bundles of Attempts not spawned yet: the cache keeps them."""
        pinned: set[str] = set()
        cursor: int | None = None
        while page := self._journal.page(cursor, PAGE_LIMIT_MAX, states=UNFETCHED):
            pinned |= {d for r in page if (d := Inbox.from_data(r.data).offer.offer.plan.bundle) is not None}
            cursor = page[-1].seq
        return pinned

    async def _renew(self, record: Record, session: Session, inbox: Inbox) -> Record:
        """Renew the Lease of a task not spawned yet, and persist it; the next pass replays the starting ACK
        and spawns (or, under a cancel intent, gets not_started). No answer: the next tick tries again."""
        answer, renewed = await renew(self._client, session, inbox)
        if answer.status == "terminal":
            return self._save(
                record, "control_plane_terminal", inbox.replace(reason=f"terminal {answer.attempt_status}")
            )
        return self._save(record, record.state, renewed)

    def _resume_launch(self, record: Record, inbox: Inbox) -> Record:
        """A restart found `launching`: decide from the launch's evidence (files and process identity)."""
        assert inbox.launch_nonce is not None
        found = recover_launch(self._executor, inbox.offer_id, inbox.launch_nonce)
        if found.handle is not None:
            return self._save(record, "started", inbox.replace(handle=found.handle.to_dict(), reason=found.reason))
        if found.never_started:
            return self._start_failed(record, inbox, "launch.never_started", found.reason)
        reason = f"restart during launch: {found.reason}"
        return self._save(record, "recovery_required", inbox.replace(reason=reason))

    async def _spawn(self, record: Record, inbox: Inbox, values: Mapping[str, bytes]) -> Record:
        plan = inbox.offer.offer.plan
        assert inbox.launch_nonce is not None
        latest = [record]  # the record as last saved (the files' identities are saved during the spawn)

        def identified(files: tuple[SecretFile, ...]) -> None:
            latest[0] = self._save(latest[0], "launching", Inbox.from_data(latest[0].data).with_files(files))

        bundle = None
        if plan.bundle is not None:
            try:
                bundle = self._bundles.read(plan.bundle)
            except (BundleError, FileNotFoundError) as error:
                code = error.code if isinstance(error, BundleError) else UNAVAILABLE
                return self._start_failed(latest[0], inbox, code, str(error))
        delivery = None
        if inbox.secret_files:
            file_values = {path: values[name] for path, name in (plan.secret_files or {}).items()}
            delivery = FileDelivery(inbox.files(), file_values, identified)
        try:
            handle = await self._executor.spawn(
                offer_id=inbox.offer_id,
                launch_nonce=inbox.launch_nonce,
                argv=list(plan.argv),
                env=dict(plan.env or {}),
                timeout_ms=plan.timeout_ms,
                deadline_at_ms=inbox.deadline_at_ms,
                lease_expires_boottime_ns=inbox.lease_expires_boottime_ns,
                run_id=inbox.offer.offer.run_id,
                cwd=plan.cwd,
                user=plan.user,
                group=plan.group,
                secret_env={variable: values[name] for variable, name in (plan.secret_env or {}).items()},
                secret_files=delivery,
                bundle=bundle,
            )
        except ExecutorRefused as refused:
            return self._start_failed(latest[0], Inbox.from_data(latest[0].data), refused.code, refused.message)
        except OSError as error:
            message = f"the runner could not be started: {error.strerror or type(error).__name__}"
            return self._start_failed(latest[0], Inbox.from_data(latest[0].data), "spawn.os_error", message)
        if plan.secret_names():
            self._values.put(inbox.offer_id, values.values())  # for the coordinator to mask the output with
        started = Inbox.from_data(latest[0].data).replace(handle=handle.to_dict())
        saved = self._save(latest[0], "started", started)
        if bundle is not None:
            self._bundles.evict(self._pinned())  # unpacked: no longer needed by this Attempt
        return saved
