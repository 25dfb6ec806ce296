"""Transaction pooling (docs/operations.md, "pgbouncer"): the shell through a real pgbouncer (Debian's: 1.18
on Debian 12, 1.24 on Debian 13; pool_mode = transaction, two server connections per database and user for the
shell's pool of four) in front of the session cluster, a fresh database per test.

With `prepared_statements = false` in shell.toml, a real Worker process completes Runs and the user API
enqueues, cancels (the SERIALIZABLE call) and reads timelines; the admin console (SHOW CLIENTS, SERVERS,
STATS) and pg_stat_activity prove every call went through pgbouncer, over at most two server connections
that the shell's client connections shared. With prepared statements on (the default, right for a direct
connection), the same reads fail: pgbouncer before 1.21 keeps no prepared statement, so a statement psycopg
prepared on one server connection is missing on the next (26000) or its name is taken there (42P05), answered
500 internal.error and logged with that SQLSTATE; or the name there is another client's statement, which the
server refuses only because its parameter count differs (08P01, 503); from 1.21 the same holds with
max_prepared_statements = 0, which the fixture sets. The same reads over a direct connection pass, and so do
they through a pgbouncer from 1.21 that tracks prepared statements (max_prepared_statements = 200).

Touches: a temporary folder under /tmp (pgbouncer's configuration), a pgbouncer child process (run as the
postgres OS user: it refuses to run as root), the session cluster's per-test database, loopback ports, the
test's tmp_path (shell.toml, the Worker's journal and work folders) and Worker processes.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, LiteralString

import psycopg
import pytest

from qinglong.devdb import Cluster
from qinglong.shell.config import load
from qinglong.shell.db import Database
from tests.conftest import Database as PgDatabase
from tests.integration.shell.conftest import (
    Logs,
    Pki,
    Reply,
    seed_database,
    serve_shell,
    user_call,
    user_http,
)
from tests.integration.shell.conftest import logs as logs  # fixtures reused here
from tests.integration.shell.conftest import pki as pki
from tests.integration.worker.conftest import (
    ENDED_RUN,
    Rig,
    child_subreaper,
    poll,
    rig_over,
)
from tests.support.env import free_port

pytestmark = pytest.mark.db

SERVER_POOL: Final = 2  # pgbouncer's default_pool_size: server connections per database and user
SHELL_POOL: Final = 4
ENQUEUE: Final = "qinglong/run-enqueue@v1"
CANCEL: Final = "qinglong/run-cancellation@v1"
LOST_PREPARED: Final = frozenset({"26000", "42P05"})  # invalid_sql_statement_name, duplicate_prepared_statement
MISMATCHED_BIND: Final = "08P01"  # "bind message supplies 2 parameters, but prepared statement … requires 5"
TRACKING_FROM: Final = (1, 21)  # the first pgbouncer with max_prepared_statements


def _version() -> tuple[int, int]:
    """The installed pgbouncer's (major, minor), from `pgbouncer --version` ("PgBouncer 1.18.0")."""
    first = subprocess.run(["pgbouncer", "--version"], capture_output=True, text=True, check=True).stdout.split()
    major, minor = first[1].split(".")[:2]
    return int(major), int(minor)


# -- pgbouncer -------------------------------------------------------------------------------------


@dataclass
class Bouncer:
    """A pgbouncer in front of the session cluster: every database name is passed through (`*`), as the
    client's user, with trust (the cluster trusts loopback); `postgres` may use the admin console."""

    port: int
    popen: subprocess.Popen[bytes]
    log: Path

    def dsn(self, dbname: str, user: str = "ql_runtime") -> str:
        return f"host=127.0.0.1 port={self.port} user={user} dbname={dbname}"

    def console(self, command: LiteralString) -> list[dict[str, Any]]:
        """The admin console's rows of `command` (SHOW …)."""
        with psycopg.connect(self.dsn("pgbouncer", "postgres"), autocommit=True) as conn:
            cur = conn.execute(command)
            names = [d.name for d in cur.description or ()]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def show(self, command: LiteralString, database: str) -> list[dict[str, Any]]:
        """The rows of `command` (SHOW CLIENTS, SERVERS, STATS…) about one database."""
        return [row for row in self.console(command) if row["database"] == database]


@pytest.fixture
def bouncer(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[Bouncer]:
    """pgbouncer with max_prepared_statements = the test's indirect parameter (0 unless given), a setting
    written only where the version has it (1.21 on)."""
    tracked: int = getattr(request, "param", 0)
    tracking = f"max_prepared_statements = {tracked}" if _version() >= TRACKING_FROM else ""
    folder = Path(tempfile.mkdtemp(prefix="ql-pgbouncer-", dir="/tmp"))  # postgres must read it
    folder.chmod(0o755)
    port = free_port()
    users = folder / "users.txt"
    users.write_text('"ql_runtime" ""\n"postgres" ""\n')  # trust: the names must still be listed
    config = folder / "pgbouncer.ini"
    config.write_text(
        "\n".join(
            (
                "[databases]",
                f"* = host={cluster.host} port={cluster.port}",
                "[pgbouncer]",
                f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =",
                f"auth_type = trust\nauth_file = {users}\nadmin_users = postgres",
                f"pool_mode = transaction\ndefault_pool_size = {SERVER_POOL}\nmax_client_conn = 64",
                tracking,
                "",
            )
        )
    )
    for path in (users, config):
        path.chmod(0o644)
    log = folder / "pgbouncer.log"
    with log.open("wb") as out:
        user = ["-u", "postgres"] if os.geteuid() == 0 else []  # it refuses to run as root; -u drops to postgres
        popen = subprocess.Popen(["pgbouncer", *user, str(config)], stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    running = Bouncer(port, popen, log)
    try:
        deadline = time.monotonic() + 10
        while True:
            assert popen.poll() is None, log.read_text()
            try:
                running.console("SHOW VERSION")
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield running
    finally:
        if popen.poll() is None:
            popen.send_signal(signal.SIGTERM)  # immediate shutdown
            try:
                popen.wait(10)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait()
        shutil.rmtree(folder, ignore_errors=True)


def test_the_bouncer_keeps_no_prepared_statement(bouncer: Bouncer) -> None:
    """The failures shown below need a pgbouncer that keeps no prepared statement in transaction mode: one
    before 1.21 (Debian 12's 1.18), or one from 1.21 with max_prepared_statements = 0 (Debian 13's 1.24)."""
    [row] = bouncer.console("SHOW VERSION")
    version = tuple(int(n) for n in str(row["version"]).split()[1].split(".")[:2])
    assert version == _version(), row
    if version >= TRACKING_FROM:
        tracked = {r["key"]: r["value"] for r in bouncer.console("SHOW CONFIG")}["max_prepared_statements"]
        assert tracked == "0", tracked


# -- the shell through it --------------------------------------------------------------------------


def _shell_toml(folder: Path, pki: Pki, dsn: str, *, prepared_statements: bool) -> Path:
    secret = folder / "cluster.secret"
    secret.write_bytes(os.urandom(32).hex().encode())
    secret.chmod(0o600)
    config = folder / "shell.toml"
    config.write_text(
        f'[database]\ndsn = "{dsn}"\npool_size = {SHELL_POOL}\n'
        f"prepared_statements = {json.dumps(prepared_statements)}\n\n"
        f'[secret]\ncluster_secret_file = "{secret}"\n\n'
        f'[worker_listener]\nhost = "127.0.0.1"\nport = 8443\ncertificate = "{pki.server.certificate}"\n'
        f'key = "{pki.server.key}"\nclient_ca = "{pki.ca}"\n\n'
        f'[user_listener]\nhost = "127.0.0.1"\nport = 9443\ncertificate = "{pki.server.certificate}"\n'
        f'key = "{pki.server.key}"\n'
    )
    return config


@pytest.fixture
async def bounced_rig(database: PgDatabase, pki: Pki, tmp_path: Path, bouncer: Bouncer) -> AsyncIterator[Rig]:
    """The Worker tests' rig (tests/integration/worker/conftest.py), its shell's pool made from a shell.toml
    whose DSN is pgbouncer's and whose prepared_statements is false."""
    config = load(_shell_toml(tmp_path, pki, bouncer.dsn(database.name), prepared_statements=False))
    assert (config.prepared_statements, config.pool_size) == (False, SHELL_POOL)
    async with rig_over(database, pki, tmp_path, Database.of(config), "project-b") as made:
        yield made


async def test_a_worker_process_and_the_user_api_work_through_pgbouncer_in_transaction_mode(
    bounced_rig: Rig, bouncer: Bouncer
) -> None:
    rig = bounced_rig
    shell = rig.served.shell
    assert shell is not None
    runs_path = f"/api/v3/projects/{rig.project}/runs"
    quick = rig.add_runs({"argv": ["sh", "-c", "echo through pgbouncer"]}, 3)
    task = str(rig.one("select task_id::text from ql.runs where id = %s", (quick[0],)))
    user_calls = 0
    async with user_http(rig.pki) as http:

        async def user(method: str, path: str, body: dict[str, Any] | None = None) -> Reply:
            nonlocal user_calls
            user_calls += 1
            return await user_call(http, shell, method, path, token=rig.operator.token, body=body)

        with child_subreaper():
            worker = rig.start_worker_process(rig.write_config(tick_seconds=0.2))
            await poll(lambda: all(rig.run_status(r) in ENDED_RUN for r in quick), within=30, every=0.05)
            assert [rig.run_status(r) for r in quick] == ["succeeded"] * 3, worker.output()

            enqueued = await user("POST", runs_path, {"schema": ENQUEUE, "taskId": task, "mutationId": "b-1"})
            assert enqueued.status == 202 and enqueued.json()["status"] == "enqueued", enqueued
            run = str(enqueued.json()["runId"])
            await poll(lambda: rig.run_status(run) in ENDED_RUN, within=30, every=0.05)
            assert rig.run_status(run) == "succeeded", worker.output()

            long = rig.add_run({"argv": ["sleep", "30"], "timeoutMs": 60000})
            await poll(lambda: rig.run_status(long) == "running", within=30, every=0.05)
            cancel = {"schema": CANCEL, "mutationId": "b-2"}
            cancelled = await user("POST", f"{runs_path}/{long}/cancellation", cancel)
            assert cancelled.status == 202 and cancelled.json()["status"] == "accepted", cancelled
            await poll(lambda: rig.run_status(long) in ENDED_RUN, within=30, every=0.05)
            assert rig.run_status(long) == "cancelled", worker.output()
            again = await user("POST", f"{runs_path}/{long}/cancellation", cancel)
            assert again.status == 200, again

            timeline = await user("GET", f"{runs_path}/{run}")
            assert timeline.status == 200, timeline
            assert [e["type"] for e in timeline.json()["events"]][-1] == "run.succeeded"
            timeline = await user("GET", f"{runs_path}/{long}")
            assert timeline.status == 200, timeline
            types = [e["type"] for e in timeline.json()["events"]]
            assert "run.cancel_requested" in types and types[-2:] == ["attempt.cancelled", "run.cancelled"], types

            # More concurrent calls than server connections: the pool opens its connections, which share two.
            burst = await asyncio.gather(*(user("GET", f"{runs_path}/{r}") for r in [*quick, run, long] * 4))
            assert {r.status for r in burst} == {200}

            worker.popen.send_signal(signal.SIGTERM)
            assert await worker.wait(10) == 0, worker.output()

    name = rig.database.name
    clients = [c for c in bouncer.show("SHOW CLIENTS", name) if c["user"] == "ql_runtime"]
    servers = bouncer.show("SHOW SERVERS", name)
    [stats] = bouncer.show("SHOW STATS", name)
    backends = {
        int(pid)
        for (pid,) in rig.rows(
            "select pid from pg_stat_activity where datname = %s and usename = 'ql_runtime'", (rig.database.name,)
        )
    }
    assert SERVER_POOL < len(clients) <= SHELL_POOL, clients  # the shell's pool, connected to pgbouncer
    assert {c["application_name"] for c in clients} == {"qinglong-shell"}
    assert 0 < len(servers) <= SERVER_POOL, servers
    assert backends and backends <= {int(s["remote_pid"]) for s in servers}, (backends, servers)  # none direct
    calls = len(rig.served.seen) + 2 * user_calls  # a user call is admission + its route's call
    assert stats["total_xact_count"] >= calls, (stats, calls)


async def _timeline_reads(
    dsn: str, prepared_statements: bool, pki: Pki, database: PgDatabase, logs: Logs
) -> tuple[set[tuple[int, str | None]], list[dict[str, Any]]]:
    """Concurrent timeline reads (admission + run_timeline_v1, each run more often than the 5 times after which
    psycopg prepares) by a shell whose DSN is `dsn`: the set of (status, code) answered and the shell's
    database_error log lines."""
    seed = seed_database(database.dsn(), pki)
    db = Database(dsn, max_size=SHELL_POOL, prepared_statements=prepared_statements)
    async with serve_shell(db, pki) as shell, user_http(pki) as http:
        paths = [f"/api/v3/projects/{seed.project_p}/runs/{r}" for r in seed.runs_p]
        replies: list[Reply] = []
        for _ in range(10):
            replies += await asyncio.gather(
                *(user_call(http, shell, "GET", p, token=seed.operator.token) for p in paths * 2)
            )
    errors = [json.loads(line) for line in logs.shell.lines if '"event": "database_error"' in line]
    return {(r.status, r.code) for r in replies}, errors


@pytest.mark.parametrize(
    ("through", "prepared_statements"),
    [("pgbouncer", False), ("pgbouncer", True), ("direct", True)],
    ids=["pgbouncer-prepared-off", "pgbouncer-prepared-on", "direct-prepared-on"],
)
async def test_prepared_statements_fail_through_pgbouncer_in_transaction_mode_only(
    through: str, prepared_statements: bool, pki: Pki, database: PgDatabase, bouncer: Bouncer, logs: Logs
) -> None:
    """With prepared statements on through a pgbouncer that keeps none, some reads are 500 internal.error,
    logged with the SQLSTATE of a lost prepared statement; every other way, all are 200."""
    dsn = bouncer.dsn(database.name) if through == "pgbouncer" else database.runtime_dsn
    statuses, errors = await _timeline_reads(dsn, prepared_statements, pki, database, logs)
    if through == "direct" or not prepared_statements:
        assert statuses == {(200, None)} and errors == [], (statuses, errors)
        return
    refused = {(500, "internal.error"), (503, "storage.unavailable")}
    assert (500, "internal.error") in statuses and statuses <= {(200, None), *refused}, statuses
    states = {e["sqlstate"] for e in errors}
    assert states & LOST_PREPARED and states <= {*LOST_PREPARED, MISMATCHED_BIND}, errors


@pytest.mark.skipif(_version() < TRACKING_FROM, reason="this pgbouncer cannot track prepared statements (< 1.21)")
@pytest.mark.parametrize("bouncer", [200], indirect=True, ids=["max_prepared_statements=200"])
async def test_prepared_statements_work_through_a_pgbouncer_that_tracks_them(
    pki: Pki, database: PgDatabase, bouncer: Bouncer, logs: Logs
) -> None:
    """From pgbouncer 1.21, max_prepared_statements > 0 keeps psycopg's protocol-level prepared statements
    across server connections: the same reads with prepared statements on are all 200."""
    statuses, errors = await _timeline_reads(bouncer.dsn(database.name), True, pki, database, logs)
    assert statuses == {(200, None)} and errors == [], (statuses, errors)
