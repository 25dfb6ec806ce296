"""Storage faults (docs/architecture.md §6, docs/operations.md §10): with the database down every route
answers 503 storage.unavailable and /healthz 503; once the same cluster is back (same data folder and port)
the same shell process serves again without a restart. A pooled connection whose backend was terminated
between two requests is replaced before the next request uses it (no 503). Database errors are answered by
their SQLSTATE (qinglong.shell.db.classify), each raised by the real server: a read-only database (what a
standby answers after a failover, 25006) and a backend terminated mid-call (57P01) are 503
storage.unavailable; a serialization failure or deadlock the shell's retries did not clear (40001, 40P01) is
503 storage.conflict; a bug (a raise, 42883 undefined_function, a data exception) is 500 internal.error,
logged with its SQLSTATE and class, never with the message that quotes a parameter. A failed call changes
nothing but the admission's audit row.

The down-and-back test uses the private cluster of this folder (never the session cluster the other tests
share); the others replace or drop a ql_api function, or make the database read-only, in their own fresh
database of the session cluster.
Touches: a fresh database on the private cluster, which one test stops and starts; fresh databases of the
session cluster (functions replaced, a sequence created, backends terminated); loopback ports; the
`qinglong.shell` log (captured).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Final

import aiohttp
import psycopg
import pytest
from psycopg import errors as pg_errors
from psycopg_pool import PoolTimeout

from qinglong.shell.db import (
    SERIALIZABLE_ATTEMPTS,
    Database,
    DatabaseFault,
    StorageConflict,
    StorageError,
    StorageUnavailable,
    classify,
)
from qinglong.wire.logline import settled
from tests.conftest import Database as PgDatabase
from tests.integration.shell.conftest import (
    SESSION_SCHEMA,
    Logs,
    Pki,
    PrivateCluster,
    Reply,
    Seed,
    Shell,
    WorkerClient,
    audit_rows,
    image_diff,
    ql_image,
    reply_of,
    seed_database,
    serve_shell,
    user_call,
    user_http,
)

pytestmark = pytest.mark.db


async def test_database_down_is_503_and_the_shell_recovers(
    pki: Pki, private_cluster: PrivateCluster, private_database: PgDatabase
) -> None:
    cluster = private_cluster.cluster
    seed = seed_database(private_database.dsn(), pki)
    db = Database(private_database.runtime_dsn, timeout=2.0)
    async with (
        serve_shell(db, pki) as shell,
        WorkerClient(shell, seed.worker_a, pki.client_context(pki.worker_a)) as worker,
        user_http(pki) as http,
        aiohttp.ClientSession() as admin,
    ):
        timeline = f"/api/v3/projects/{seed.project_p}/runs/{seed.runs_p[0]}"

        async def heartbeat() -> Reply:
            return await worker.post("/heartbeat", {"schema": SESSION_SCHEMA, "workerGeneration": 1})

        async def read() -> Reply:
            return await user_call(http, shell, "GET", timeline, token=seed.operator.token)

        async def healthz() -> Reply:
            async with admin.get(shell.admin_url + "/healthz") as resp:
                return await reply_of(resp)

        assert (await worker.open()).status == 200
        assert (await heartbeat()).status == 200
        assert (await read()).status == 200
        assert (await healthz()).status == 200

        port = cluster.port
        await asyncio.to_thread(cluster.stop)
        try:
            for name, call in (("heartbeat", heartbeat), ("timeline", read), ("heartbeat again", heartbeat)):
                reply = await call()
                assert (reply.status, reply.code) == (503, "storage.unavailable"), (name, reply)
                assert reply.json()["schema"] == "qinglong/error@v1"
            health = await healthz()
            assert health.status == 503 and health.json() == {"status": "storage_unavailable"}
        finally:
            await asyncio.to_thread(cluster.start)
        assert cluster.port == port

        # The pool reconnects on its own: within a bounded time the same shell answers 200 again.
        deadline = time.monotonic() + 20
        statuses: list[int] = []
        while True:
            reply = await heartbeat()
            statuses.append(reply.status)
            if reply.status != 503 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        assert reply.status == 200 and reply.json()["status"] == "alive", (statuses, reply)
        assert (await read()).status == 200
        health = await healthz()
        assert health.status == 200 and health.json() == {"status": "ok", "warnings": []}


# -- SQLSTATE → code ------------------------------------------------------------------------------------

CANCEL: Final = "qinglong/run-cancellation@v1"
ENQUEUE: Final = "qinglong/run-enqueue@v1"
MARKER: Final = "param-marker-5d1e9c"  # a parameter value a function's error message quotes


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (pg_errors.ConnectionFailure(), StorageUnavailable),  # 08006
        (pg_errors.ProtocolViolation(), StorageUnavailable),  # 08P01, also what pgbouncer's own errors carry
        (pg_errors.AdminShutdown(), StorageUnavailable),  # 57P01
        (pg_errors.CannotConnectNow(), StorageUnavailable),  # 57P03
        (pg_errors.QueryCanceled(), StorageUnavailable),  # 57014, statement_timeout
        (pg_errors.TooManyConnections(), StorageUnavailable),  # 53300
        (pg_errors.ReadOnlySqlTransaction(), StorageUnavailable),  # 25006, a standby
        (psycopg.OperationalError("server closed the connection unexpectedly"), StorageUnavailable),
        (PoolTimeout("no connection in time"), StorageUnavailable),
        (pg_errors.SerializationFailure(), StorageConflict),  # 40001
        (pg_errors.DeadlockDetected(), StorageConflict),  # 40P01
        (pg_errors.UndefinedFunction(), DatabaseFault),  # 42883
        (pg_errors.RaiseException(), DatabaseFault),  # P0001
        (pg_errors.DivisionByZero(), DatabaseFault),  # 22012
        (pg_errors.InsufficientPrivilege(), DatabaseFault),  # 42501
        (pg_errors.InvalidSqlStatementName(), DatabaseFault),  # 26000, a prepared statement a pooler lost
        (pg_errors.TransactionRollback(), DatabaseFault),  # 40000: not one of the two the shell retries
        (psycopg.InterfaceError("a client-side bug"), DatabaseFault),
        (psycopg.ProgrammingError("a client-side bug"), DatabaseFault),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else v.__name__,
)
def test_a_database_error_is_classified_by_its_sqlstate(error: psycopg.Error, kind: type[StorageError]) -> None:
    found = classify(error)
    assert type(found) is kind
    assert (found.sqlstate, found.error) == (error.sqlstate, type(error).__name__)


def _replace_function(dsn: str, function: str, body: str) -> None:
    """ql_api.<function> of this test's database gets `body` (plpgsql), keeping its signature, owner and grants."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("select pg_get_function_arguments(%s::regproc)", (f"ql_api.{function}",)).fetchone()
        assert row is not None
        conn.execute(
            f"create or replace function ql_api.{function}({row[0]}) returns jsonb language plpgsql security definer"
            f" set search_path = pg_catalog, pg_temp as $body$ {body} $body$".encode()
        )


def _tries(dsn: str) -> int:
    """How often a replaced function ran (public.tries: a sequence, so rolled-back calls count too)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("select case when is_called then last_value else 0 end from public.tries").fetchone()
        assert row is not None
        return int(row[0])


def _counting(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create sequence public.tries; grant usage on sequence public.tries to ql_owner")
    return "perform pg_catalog.nextval('public.tries');"


def _database_errors(logs: Logs) -> list[dict[str, Any]]:
    return [json.loads(line) for line in logs.shell.lines if '"event": "database_error"' in line]


@pytest.mark.parametrize(
    ("route", "sqlstate", "tries"),
    [
        ("cancel", "40001", SERIALIZABLE_ATTEMPTS),
        ("cancel", "40P01", SERIALIZABLE_ATTEMPTS),
        ("enqueue", "40P01", 1),  # no retry outside the SERIALIZABLE call: the caller retries the 503
    ],
)
async def test_a_conflict_the_retries_did_not_clear_is_503_storage_conflict(
    route: str, sqlstate: str, tries: int, pki: Pki, shell: Shell, seed: Seed, database: PgDatabase, logs: Logs
) -> None:
    function = {"cancel": "run_cancel_request_v1", "enqueue": "run_enqueue_v1"}[route]
    _replace_function(
        database.dsn(), function, f"begin {_counting(database.dsn())} raise exception using errcode = '{sqlstate}'; end"
    )
    settled(f"database_error:{sqlstate}")
    runs = f"/api/v3/projects/{seed.project_p}/runs"
    path, body = {
        "cancel": (f"{runs}/{seed.runs_p[0]}/cancellation", {"schema": CANCEL, "mutationId": "conflict-1"}),
        "enqueue": (runs, {"schema": ENQUEUE, "taskId": seed.task_p, "mutationId": "conflict-1"}),
    }[route]
    before = await ql_image(database.dsn())
    async with user_http(pki) as http:
        reply = await user_call(http, shell, "POST", path, token=seed.operator.token, body=body)
    assert (reply.status, reply.code) == (503, "storage.conflict"), reply
    assert _tries(database.dsn()) == tries
    assert image_diff(before, await ql_image(database.dsn())) == {"security_audit": 1}  # admission's row only
    [logged] = _database_errors(logs)
    assert (logged["sqlstate"], logged["route"], logged["request_id"]) == (
        sqlstate,
        f"user.runs.{route}",
        reply.json()["requestId"],
    )


@pytest.mark.parametrize(
    ("case", "sqlstate", "error"),
    [
        ("raise", "P0001", "RaiseException"),
        ("undefined", "42883", "UndefinedFunction"),
        ("data", "22012", "DivisionByZero"),
    ],
)
async def test_a_database_bug_is_500_internal_error_logged_with_its_sqlstate_never_its_parameters(
    case: str, sqlstate: str, error: str, pki: Pki, shell: Shell, seed: Seed, database: PgDatabase, logs: Logs
) -> None:
    if case == "undefined":  # the shell and the deployed schema disagree
        with psycopg.connect(database.dsn(), autocommit=True) as conn:
            conn.execute("drop function ql_api.run_enqueue_v1")
    else:
        body = {"raise": "raise exception 'refused %', p_mutation_id;", "data": "return to_jsonb(1 / 0);"}[case]
        _replace_function(database.dsn(), "run_enqueue_v1", f"begin {body} end")
    before = await ql_image(database.dsn())
    enqueue = {"schema": ENQUEUE, "taskId": seed.task_p, "mutationId": MARKER}
    async with user_http(pki) as http:
        runs = f"/api/v3/projects/{seed.project_p}/runs"
        reply = await user_call(http, shell, "POST", runs, token=seed.operator.token, body=enqueue)
    assert (reply.status, reply.code) == (500, "internal.error"), reply
    assert image_diff(before, await ql_image(database.dsn())) == {"security_audit": 1}
    [logged] = _database_errors(logs)
    assert (logged["sqlstate"], logged["error"], logged["route"]) == (sqlstate, error, "user.runs.enqueue")
    assert logged["request_id"] == reply.json()["requestId"]
    assert MARKER not in logs.everything.text and MARKER.encode() not in reply.body


async def test_a_read_only_database_is_503_storage_unavailable_and_nothing_is_written(
    pki: Pki, database: PgDatabase, logs: Logs
) -> None:
    """What a standby answers a write (25006): the shell pointed at a node that is no longer the primary."""
    seed = seed_database(database.dsn(), pki)
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        conn.execute(f"alter database {database.name} set default_transaction_read_only = on")
    settled("database_error:25006")
    before = await ql_image(database.dsn())
    async with (
        serve_shell(Database(database.runtime_dsn), pki) as shell,
        WorkerClient(shell, seed.worker_a, pki.client_context(pki.worker_a)) as worker,
        user_http(pki) as http,
    ):
        opened = await worker.open()
        read = await user_call(
            http, shell, "GET", f"/api/v3/projects/{seed.project_p}/runs/{seed.runs_p[0]}", token=seed.operator.token
        )
    for reply in (opened, read):
        assert (reply.status, reply.code) == (503, "storage.unavailable"), reply
    assert image_diff(before, await ql_image(database.dsn())) == {}
    assert await audit_rows(database.dsn(), "user.runs.read") == []
    logged = _database_errors(logs)
    assert logged and {(e["sqlstate"], e["error"]) for e in logged} == {("25006", "ReadOnlySqlTransaction")}


async def test_a_backend_terminated_mid_call_is_503_storage_unavailable(
    pki: Pki, shell: Shell, seed: Seed, database: PgDatabase
) -> None:
    _replace_function(database.dsn(), "run_timeline_v1", "begin perform pg_catalog.pg_sleep(30); return '{}'; end")
    path = f"/api/v3/projects/{seed.project_p}/runs/{seed.runs_p[0]}"
    async with user_http(pki) as http:
        pending = asyncio.create_task(user_call(http, shell, "GET", path, token=seed.operator.token))
        with psycopg.connect(database.dsn(), autocommit=True) as conn:
            sleeping = "select pid from pg_stat_activity where datname = %s and query like '%%run_timeline_v2%%'"
            deadline = time.monotonic() + 10
            while not (rows := conn.execute(sleeping + " and pid <> pg_backend_pid()", (database.name,)).fetchall()):
                assert time.monotonic() < deadline, "the call never reached the database"
                await asyncio.sleep(0.02)
            conn.execute("select pg_terminate_backend(%s)", (rows[0][0],))
        reply = await asyncio.wait_for(pending, 10)
    assert (reply.status, reply.code) == (503, "storage.unavailable"), reply


async def test_terminated_pool_backends_are_replaced_before_the_next_request(
    pki: Pki, shell: Shell, seed: Seed, database: PgDatabase
) -> None:
    """After a failover or a restart every pooled connection is dead. The pool's check notices the first one
    when it would hand it out (its socket is readable: the server closed it) and replaces every connection
    opened before, so the next request waits only for a new connection and succeeds, as do the ones after it.
    Without the check it is a 503; without replacing them all, each dead one costs psycopg_pool's back-off."""
    path = f"/api/v3/projects/{seed.project_p}/runs/{seed.runs_p[0]}"
    backends = "select pid from pg_stat_activity where datname = %s and usename = 'ql_runtime'"
    async with user_http(pki) as http:

        async def read() -> Reply:
            return await user_call(http, shell, "GET", path, token=seed.operator.token)

        with psycopg.connect(database.dsn(), autocommit=True) as conn:

            def pids() -> set[int]:
                return {int(r[0]) for r in conn.execute(backends, (database.name,)).fetchall()}

            deadline = time.monotonic() + 10
            while len(pids()) < 2:  # more than one pooled connection, so one check alone would not do
                assert time.monotonic() < deadline, pids()
                assert {r.status for r in await asyncio.gather(*(read() for _ in range(8)))} == {200}
            old = pids()
            conn.execute("select pg_terminate_backend(pid) from pg_stat_activity where datname = %s"
                         " and usename = 'ql_runtime'", (database.name,))  # fmt: skip
            while pids():
                assert time.monotonic() < deadline + 5, "the backends did not end"
                await asyncio.sleep(0.02)
            started = time.monotonic()
            first = await read()
            took = time.monotonic() - started
            rest = [await read() for _ in range(5)]
            assert pids().isdisjoint(old)
    assert first.status == 200 and [r.status for r in rest] == [200] * 5, (first, rest)
    assert took < 0.9  # a new connection, not psycopg_pool's back-off (0.9 to 1.1 s, then twice that) past a dead one


async def test_a_write_no_partition_holds_is_503_storage_partition_missing_after_healthz_warned(
    pki: Pki, shell: Shell, seed: Seed, database: PgDatabase, logs: Logs
) -> None:
    """Partition maintenance that stopped for over a year, made by detaching the event partitions from now on: long
    before, /healthz (still 200) and /metrics said when the partitions end; then an enqueue, whose events find no
    partition, is 503 storage.partition_missing (not 500), logged with its SQLSTATE, and writes nothing."""
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        ahead = conn.execute(
            "select inhrelid::regclass::text from pg_inherits where inhparent = 'ql.run_events'::regclass"
            " and ql.partition_upper_ms(inhrelid::regclass) > ql.now_ms() + 200 * 86400000::bigint"
        ).fetchall()
        for (part,) in ahead:
            conn.execute(f"alter table ql.run_events detach partition {part}")
    async with aiohttp.ClientSession() as admin:
        async with admin.get(shell.admin_url + "/healthz") as resp:
            assert resp.status == 200 and await resp.json() == {"status": "ok", "warnings": ["partitions.horizon_near"]}
        async with admin.get(shell.admin_url + "/metrics") as resp:
            metrics = await resp.text()
    [horizon] = [
        line for line in metrics.splitlines() if line.startswith("qinglong_partitions_horizon_timestamp_seconds")
    ]
    assert time.time() < float(horizon.split()[1]) < time.time() + 200 * 86400
    assert "qinglong_retention_backlog_runs 0.0" in metrics and "qinglong_retention_behind_seconds 0.0" in metrics

    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        for (part,) in conn.execute(
            "select inhrelid::regclass::text from pg_inherits where inhparent = 'ql.run_events'::regclass"
        ).fetchall():
            conn.execute(f"alter table ql.run_events detach partition {part}")
    before = await ql_image(database.dsn())
    enqueue = {"schema": ENQUEUE, "taskId": seed.task_p, "mutationId": "no-partition-1"}
    async with user_http(pki) as http:
        runs = f"/api/v3/projects/{seed.project_p}/runs"
        reply = await user_call(http, shell, "POST", runs, token=seed.operator.token, body=enqueue)
    assert (reply.status, reply.code) == (503, "storage.partition_missing"), reply
    assert image_diff(before, await ql_image(database.dsn())) == {"security_audit": 1}  # admission's row only
    [logged] = _database_errors(logs)
    assert (logged["sqlstate"], logged["error"], logged["route"]) == ("23514", "CheckViolation", "user.runs.enqueue")
