"""Notifications end to end on real parts (docs/decisions/0023-notifications.md): Runs ended failed through the
Worker's real calls write their outbox rows; `qinglong notify serve`, a process of its own logged in as ql_notify,
delivers them to an aiohttp receiver on loopback that verifies every HMAC-SHA256 signature and counts deliveries by
their idempotency key. The dispatcher is SIGKILLed while requests are in flight and started again: every
notification arrives, the interrupted ones again under the same key. The receiver is down (its port closed) while
notifications fall due: each attempt is recorded (connect), the backoff is PostgreSQL's, and once it is back every
notification arrives, none lost. On a cluster that logs every statement, the secret is in no statement, no row and
no log.

Touches: the test database, a loopback port, a temporary folder, the dispatcher processes it starts (stopped).
"""

from __future__ import annotations

import asyncio
import base64
import time
from pathlib import Path

import psycopg

from tests.conftest import Database, PrivateCluster
from tests.support.notify import DispatcherProcess, Receiver, fail_runs, outbox_ids, prepare, states


async def until(condition: object, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out after {within} s waiting for {what}")


def _delivered(dsn: str, project: object, count: int) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return states(conn, project)["delivered"] == count  # type: ignore[arg-type]


async def test_killed_mid_delivery_and_restarted_loses_nothing(database: Database, tmp_path: Path) -> None:
    receiver = Receiver(key=b"", delay=1.5)
    await receiver.start()
    dispatcher: DispatcherProcess | None = None
    try:
        with psycopg.connect(database.dsn(), autocommit=True) as conn:
            setup = prepare(conn, tmp_path, receiver.url)
            receiver.key = setup.key
            fail_runs(conn, database.runtime_dsn, setup, 12)
            ids = outbox_ids(conn, setup.project)
        assert len(ids) == 12, "each failed Run wrote one outbox row in its completion's transaction"
        config = DispatcherProcess.write_config(tmp_path, database.dsn("ql_notify"), setup.kek_file,
                                                batch=12, concurrency=12, lease=5.0, timeout=2.5, poll=0.2)  # fmt: skip
        dispatcher = DispatcherProcess(config, tmp_path / "notify.log")
        dispatcher.start()
        await until(lambda: receiver.inflight >= 6, 30, "deliveries in flight")
        dispatcher.kill()  # mid-delivery: the receiver holds each request 1.5 s
        in_flight_at_kill = receiver.inflight
        assert in_flight_at_kill >= 6
        dispatcher.start()
        await until(lambda: _delivered(database.dsn(), setup.project, 12), 60, "every notification delivered")
        assert set(receiver.seen) == ids, "every notification arrived, under its own key, none lost"
        assert receiver.bad_signatures == 0
        with psycopg.connect(database.dsn(), autocommit=True) as conn:
            retried = conn.execute(
                "select count(*) from ql.notify_outbox o where o.project_id = %s and o.attempts >= 2"
                " and not exists (select from ql.notify_deliveries d where d.outbox_id = o.id and d.attempt_no = 1)",
                (setup.project,),
            ).fetchone()
        assert retried is not None and retried[0] >= in_flight_at_kill - 1, (
            "the claims the kill interrupted left no result and were claimed again after their lease"
        )
        body = next(iter(receiver.bodies.values()))
        assert body["event"] == "run.failed" and body["data"]["event"] == "run.failed"
        assert dispatcher.stop() == 0, "SIGTERM ends it cleanly"
        log = (tmp_path / "notify.log").read_text()
        assert setup.key.decode() not in log, "the secret never reaches the dispatcher's log"
        assert '"notify.attempt"' in log
    finally:
        if dispatcher is not None:
            dispatcher.stop()
        await receiver.stop()


async def test_receiver_down_then_back_every_notification_arrives(database: Database, tmp_path: Path) -> None:
    receiver = Receiver(key=b"")
    await receiver.start()
    await receiver.down()
    dispatcher: DispatcherProcess | None = None
    try:
        with psycopg.connect(database.dsn(), autocommit=True) as conn:
            conn.execute("update ql.settings set notify_backoff_base_ms = 300, notify_backoff_cap_ms = 1500")
            setup = prepare(conn, tmp_path, receiver.url)
            receiver.key = setup.key
            fail_runs(conn, database.runtime_dsn, setup, 10)
            ids = outbox_ids(conn, setup.project)
        config = DispatcherProcess.write_config(tmp_path, database.dsn("ql_notify"), setup.kek_file,
                                                batch=16, concurrency=8, lease=4.0, timeout=2.0, poll=0.2)  # fmt: skip
        dispatcher = DispatcherProcess(config, tmp_path / "notify.log")
        dispatcher.start()
        await asyncio.sleep(4.0)  # down: every attempt refused
        with psycopg.connect(database.dsn(), autocommit=True) as conn:
            failed = conn.execute(
                "select count(distinct outbox_id), count(*), bool_and(error = 'connect' and not ok)"
                " from ql.notify_deliveries d join ql.notify_outbox o on o.id = d.outbox_id where o.project_id = %s",
                (setup.project,),
            ).fetchone()
            gaps = conn.execute(
                "select max(d2.at_ms - d1.at_ms) from ql.notify_deliveries d1"
                " join ql.notify_deliveries d2 on d2.outbox_id = d1.outbox_id and d2.attempt_no = d1.attempt_no + 1"
                " join ql.notify_outbox o on o.id = d1.outbox_id where o.project_id = %s",
                (setup.project,),
            ).fetchone()
        assert failed is not None and failed[0] == 10 and failed[1] >= 20 and failed[2] is True, failed
        assert gaps is not None and gaps[0] is not None and gaps[0] <= 1500 + 1500, "the backoff is capped"
        assert not receiver.seen
        await receiver.up()
        await until(lambda: _delivered(database.dsn(), setup.project, 10), 30, "every notification delivered")
        assert set(receiver.seen) == ids and receiver.duplicates == 0 and receiver.bad_signatures == 0
    finally:
        if dispatcher is not None:
            dispatcher.stop()
        await receiver.stop()


async def test_the_secret_reaches_no_statement_no_row_and_no_log(
    private_cluster: PrivateCluster, tmp_path: Path
) -> None:
    """On a cluster that logs every statement with its bind parameters: a rule is set, Runs fail, the dispatcher
    signs and delivers; the key (and its hex and base64) is in no line of the PostgreSQL log, no row of schema ql
    as text, and nor the dispatcher's log, while the receiver verified every signature with it."""
    database = private_cluster.new_database()
    offset = private_cluster.cluster.log_file.stat().st_size
    receiver = Receiver(key=b"")
    await receiver.start()
    dispatcher: DispatcherProcess | None = None
    try:
        with psycopg.connect(database.dsn(), autocommit=True) as conn:
            setup = prepare(conn, tmp_path, receiver.url)
            receiver.key = setup.key
            fail_runs(conn, database.runtime_dsn, setup, 3)
        config = DispatcherProcess.write_config(tmp_path, database.dsn("ql_notify"), setup.kek_file, poll=0.2)
        dispatcher = DispatcherProcess(config, tmp_path / "notify.log")
        dispatcher.start()
        await until(lambda: _delivered(database.dsn(), setup.project, 3), 30, "every notification delivered")
        assert len(receiver.seen) == 3 and receiver.bad_signatures == 0
        assert dispatcher.stop() == 0
        with psycopg.connect(database.dsn(), autocommit=True) as conn:
            rows = conn.execute(
                "select string_agg(t::text, ' ') from (select r::text as t from ql.notify_rules r union all"
                " select o::text from ql.notify_outbox o union all select d::text from ql.notify_deliveries d) x"
            ).fetchone()
        assert rows is not None and rows[0]
        places = {
            "postgresql log": private_cluster.cluster.log_file.read_bytes()[offset:],
            "rows": rows[0].encode(),
            "dispatcher log": (tmp_path / "notify.log").read_bytes(),
        }
        assert b"notify_claim_v1" in places["postgresql log"], "the log holds the dispatcher's statements"
        forms = (setup.key, setup.key.hex().encode(), base64.b64encode(setup.key))
        assert [name for name, text in places.items() if any(form in text for form in forms)] == []
    finally:
        if dispatcher is not None:
            dispatcher.stop()
        await receiver.stop()
        with psycopg.connect(private_cluster.cluster.dsn(), autocommit=True) as conn:
            conn.execute(f"drop database {database.name} with (force)")
