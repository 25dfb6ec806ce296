"""The headless lifecycle (docs/architecture.md §7, decision 0000 (ADR-0112 §3, ADR-0118 §5)): nothing happens before
start(); stop() aborts an in-flight pull, waits, then releases the journal; each tick supervises at
most one page of records from a stable cursor that wraps around; a recovery_required record found at
startup fails the lifecycle closed (it never pulls).
Touches: a fresh database, the in-process shell on TLS 1.3 loopback (its pull route held by a
middleware in one test), the journal (written by the test before start()), one stand-in process.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import uuid
from typing import Any, Final, Literal

import pytest

from qinglong.wire import ActivationRequest, OfferOffered
from qinglong.worker.client import Session
from qinglong.worker.coordinator import Coordinator
from qinglong.worker.identity import ProcessHandle, boot_id
from qinglong.worker.inbox import Inbox
from qinglong.worker.journal import Journal
from qinglong.worker.processor import Processor
from tests.integration.worker.conftest import Rig, proc_stat, socket_fds

pytestmark = pytest.mark.db

PHASES: Final[tuple[Literal["starting", "running"], ...]] = ("starting", "running")


async def test_nothing_happens_before_start_and_stop_aborts_the_pull_before_releasing_the_journal(rig: Rig) -> None:
    lock = rig.journal_path.with_suffix(".lock")
    tasks, sockets, threads = asyncio.all_tasks(), socket_fds(), threading.active_count()
    client = rig.client()
    lc = rig.lifecycle(client)
    # Construction: no journal file, folder or lock, no socket, no task, no thread, no step.
    assert asyncio.all_tasks() == tasks
    assert socket_fds() == sockets
    assert threading.active_count() == threads
    assert not rig.journal_path.parent.exists() and not lock.exists()
    assert client.connections_opened == 0 and client.calls == []
    assert not lc.started and list(lc.events) == []
    await lc.tick()  # a tick before start() does nothing either
    assert client.calls == [] and not rig.journal_path.parent.exists()

    await lc.start()
    assert list(lc.events) == ["own", "scanned"]
    assert rig.journal_path.exists() and client.connections_opened == 1

    rig.served.hold_pulls = True  # the control plane answers the pull slowly
    tick = asyncio.ensure_future(lc.tick())
    await asyncio.wait_for(rig.served.pull_arrived.wait(), 10)
    assert not tick.done()
    await lc.stop()
    assert tick.done()
    await tick

    assert list(lc.events)[-4:] == ["supervise", "abort", "wait", "release"]
    assert lc.pulls == 0 and "pull" not in lc.events
    [pull] = client.named("pull")
    assert isinstance(pull.error, asyncio.CancelledError)
    with Journal.open(rig.journal_path):  # ownership was released
        pass


async def _running_offers(rig: Rig, count: int) -> tuple[Session, list[OfferOffered], list[dict[str, Any]]]:
    """`count` offers pulled and acknowledged starting and running through the shell (the session, the
    offers, their running snapshots)."""
    setup = rig.client()
    session: Session = await setup.open_session(capacity=64, generation=1)
    offers: list[OfferOffered] = []
    snapshots: list[dict[str, Any]] = []
    for _ in range(count):
        offered = await setup.pull(session, str(uuid.uuid4()))
        assert isinstance(offered, OfferOffered), offered
        fence = Inbox(offer=offered, session_id=session.session_id, lease_version=1).fence(1)
        for phase in PHASES:
            ack = await setup.activate(session, offered.offer.offer_id, phase, ActivationRequest(**fence))
            assert ack.status == "applied", ack
        offers.append(offered)
        snapshots.append(ack.snapshot.to_obj())
    await setup.close()
    return session, offers, snapshots


async def test_each_tick_supervises_at_most_one_page_and_the_cursor_wraps_around(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig.set_lease_ttl(30000)
    rig.add_runs({"argv": ["true"]}, 40)
    session, offers, snapshots = await _running_offers(rig, 40)
    # Forty running Attempts whose (stand-in) process is alive, journaled before the Worker starts.
    sleeper = rig.spawn_other(["sleep", "120"])
    stat = proc_stat(sleeper.pid)
    assert stat is not None
    with Journal.open(rig.journal_path) as journal:
        for n, (offered, snapshot) in enumerate(zip(offers, snapshots, strict=True)):
            nonce = secrets.token_hex(16)
            handle = ProcessHandle(
                pid=sleeper.pid,
                pgid=sleeper.pid,
                start_time=stat.start_time,
                boot_id=boot_id(),
                log_path=str(rig.root / f"{n}.log"),
                status_path=str(rig.root / f"{n}.status.json"),
                launch_nonce=nonce,
            )
            inbox = Inbox(
                offer=offered,
                session_id=session.session_id,
                lease_version=int(snapshot["leaseVersion"]),
                snapshot=snapshot,
                launch_nonce=nonce,
                handle=handle.to_dict(),
            )
            journal.insert(offered.offer.offer_id, "running_acknowledged", inbox.to_data())
    ids = [o.offer.offer_id for o in offers]
    versions = dict(
        rig.rows(
            "select a.offer_id::text, l.version from ql.run_attempts a join ql.run_leases l on l.attempt_id = a.id"
        )
    )

    reconciled: list[str] = []
    processed: list[str] = []
    reconcile, process = Coordinator.reconcile, Processor.process

    async def spy_reconcile(self: Any, offer_id: str, session: Any) -> Any:
        reconciled.append(offer_id)
        return await reconcile(self, offer_id, session)

    async def spy_process(self: Any, record: Any, session: Any) -> Any:
        processed.append(record.offer_id)
        return await process(self, record, session)

    monkeypatch.setattr(Coordinator, "reconcile", spy_reconcile)
    monkeypatch.setattr(Processor, "process", spy_process)

    lc = rig.lifecycle(page_size=16, capacity=40)
    await lc.start()
    assert reconciled == ids  # the startup scan covers the whole journal before any pull
    per_tick: list[list[str]] = []
    for _ in range(6):
        reconciled.clear()
        await lc.tick()
        per_tick.append(list(reconciled))

    assert [len(t) for t in per_tick] == [16, 16, 8, 16, 16, 8]
    assert per_tick[0] + per_tick[1] + per_tick[2] == ids  # a stable cursor, in journal order, covering all
    assert per_tick[3:] == per_tick[:3]  # then it wraps around
    assert processed == [] and lc.pulls == 0
    # Every supervision was a real renewal: each Lease moved once at startup and once per pass.
    after = dict(
        rig.rows(
            "select a.offer_id::text, l.version from ql.run_attempts a join ql.run_leases l on l.attempt_id = a.id"
        )
    )
    assert {offer: after[offer] - versions[offer] for offer in ids} == dict.fromkeys(ids, 3)


async def test_a_recovery_required_record_at_startup_fails_closed_and_nothing_is_pulled(rig: Rig) -> None:
    claimed, queued = rig.add_runs({"argv": ["true"]}, 2)
    # A restart found this offer `launching`: whether its process was spawned is unknown.
    offered, session = await _offer_without_activation(rig)
    inbox = Inbox(
        offer=offered,
        session_id=session.session_id,
        lease_version=offered.offer.lease_version,
        reason="restart during launch",
    )
    with Journal.open(rig.journal_path) as journal:
        journal.insert(offered.offer.offer_id, "recovery_required", inbox.to_data())
    pulls_seen = rig.served.kinds().count("pull")

    client = rig.client()
    lc = rig.lifecycle(client, capacity=4)
    await lc.start()
    assert lc.failed_closed
    for _ in range(5):
        await lc.tick()
        await asyncio.sleep(0.05)

    assert lc.pulls == 0 and client.named("pull") == []
    assert rig.served.kinds().count("pull") == pulls_seen
    assert "heartbeat" in rig.served.kinds()  # the Worker is alive and connected, it just takes no work
    assert rig.run_status(queued) == "queued" and rig.attempts(queued) == []
    assert rig.attempts(claimed)[0]["status"] == "claimed"
    assert rig.state() == "recovery_required"


async def _offer_without_activation(rig: Rig) -> tuple[OfferOffered, Session]:
    setup = rig.client()
    session = await setup.open_session(capacity=4, generation=1)
    offered = await setup.pull(session, str(uuid.uuid4()))
    assert isinstance(offered, OfferOffered), offered
    await setup.close()
    return offered, session
