"""Fixtures of the shell's integration tests: a real PKI made by `qinglong.cli.pki`, the shell's three
aiohttp applications served in-process on loopback (worker ingress over TLS 1.3 mTLS, user API over
TLS 1.3, plain admin), seeded rows in a fresh database per test, a Worker client that opens a
session and signs every request with ql3w, row images of the `ql` schema, a capture of the shell's
log, and a private PostgreSQL cluster (statement logging on) that tests may stop and restart.

Touches: temporary folders under /tmp (PKI, the private cluster), the session cluster's per-test
databases, loopback ports chosen by the kernel, the `qinglong.shell` logger's handlers.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import io
import json
import logging
import os
import secrets
import shutil
import signal
import ssl
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import aiohttp
import psycopg
import pytest
from aiohttp import web
from psycopg import sql

from qinglong.cli import pki as pki_cli
from qinglong.shell.app import make_admin_app, make_app
from qinglong.shell.db import Database
from qinglong.shell.sealing import Sealer
from qinglong.shell.tls import server_context
from qinglong.wire import ql3w
from qinglong.wire.common import token_digest
from tests.conftest import Database as PgDatabase
from tests.conftest import PrivateCluster as PrivateCluster  # re-exported (its fixture: tests/conftest.py)
from tests.integration.db.factories import Subject, make_project, make_revision, make_runs, set_role

PLAN: Final = {"argv": ["true"], "timeoutMs": 60000}
JSON: Final = "application/json"
WORKER_BASE: Final = "/api/v3/workers"
LEASE_CONTROL_SCHEMA: Final = "qinglong/remote-worker-lease-control@v1"
ACTIVATION_SCHEMA: Final = "qinglong/remote-run-activation@v1"
COMPLETION_SCHEMA: Final = "qinglong/remote-run-completion@v1"
SESSION_SCHEMA: Final = "qinglong/worker-session@v1"
OFFER_SCHEMA: Final = "qinglong/remote-offer@v1"


# -- PKI -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    """The deployment CA, the shell's server certificate, Workers A and B, and a rogue CA that issued
    a certificate naming Worker A."""

    ca: Path
    server: pki_cli.Issued
    worker_a_id: str
    worker_b_id: str
    worker_a: pki_cli.Issued
    worker_b: pki_cli.Issued
    rogue_ca: Path
    rogue_a: pki_cli.Issued

    def client_context(
        self,
        cert: pki_cli.Issued | None = None,
        *,
        max_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3,
        min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3,
    ) -> ssl.SSLContext:
        """A client context trusting the deployment CA, presenting `cert` when given."""
        ctx = ssl.create_default_context(cafile=str(self.ca))
        ctx.minimum_version = min_version
        ctx.maximum_version = max_version
        if cert is not None:
            ctx.load_cert_chain(cert.certificate, cert.key)
        return ctx


@pytest.fixture(scope="session")
def pki() -> Iterator[Pki]:
    root = Path(tempfile.mkdtemp(prefix="ql-shell-pki-", dir="/tmp"))
    try:
        trusted, rogue = root / "trusted", root / "rogue"
        ca = pki_cli.init_ca(trusted)
        server = pki_cli.issue_server(trusted, ["127.0.0.1"])
        a_id, b_id = str(uuid.uuid4()), str(uuid.uuid4())
        worker_a = pki_cli.issue_worker(trusted, a_id, name="worker-a")
        worker_b = pki_cli.issue_worker(trusted, b_id, name="worker-b")
        rogue_ca = pki_cli.init_ca(rogue)
        rogue_a = pki_cli.issue_worker(rogue, a_id, name="rogue-a")
        yield Pki(ca.certificate, server, a_id, b_id, worker_a, worker_b, rogue_ca.certificate, rogue_a)
    finally:
        shutil.rmtree(root, ignore_errors=True)


# -- seeded rows ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seed:
    """What every test starts from (ids as canonical text)."""

    project_p: str
    project_q: str
    task_p: str
    task_q: str
    runs_p: tuple[str, ...]
    runs_q: tuple[str, ...]
    worker_a: str
    worker_b: str
    operator: Subject
    viewer: Subject
    agent: Subject

    @property
    def bearer_tokens(self) -> tuple[str, ...]:
        return (self.operator.token, self.viewer.token, self.agent.token)


def _subject(conn: psycopg.Connection[Any], kind: str, name: str) -> Subject:
    token = secrets.token_urlsafe(32)
    row = conn.execute(
        "insert into ql.subjects (kind, name, token_digest) values (%s, %s, %s) returning id",
        (kind, name, token_digest(token)),
    ).fetchone()
    assert row is not None
    return Subject(row[0], token)


def _task_of(conn: psycopg.Connection[Any], revision: uuid.UUID) -> str:
    row = conn.execute("select task_id from ql.task_execution_revisions where id = %s", (revision,)).fetchone()
    assert row is not None
    return str(row[0])


def seed_database(dsn: str, pki: Pki) -> Seed:
    """Projects P and Q with a task each (plan PLAN), queued Runs (3 in P, 1 in Q), Workers A and B
    enrolled with their certificates' fingerprints, and three subjects bound to P: an operator user,
    a viewer user and an agent with the operator role. Written by the superuser."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        p, q = make_project(conn, "project-p"), make_project(conn, "project-q")
        rev_p, rev_q = make_revision(conn, p, PLAN), make_revision(conn, q, PLAN)
        runs_p = make_runs(conn, rev_p, 3)
        runs_q = make_runs(conn, rev_q, 1)
        for worker_id, issued, name in (
            (pki.worker_a_id, pki.worker_a, "worker-a"),
            (pki.worker_b_id, pki.worker_b, "worker-b"),
        ):
            conn.execute(
                "insert into ql.workers (id, name, cert_fingerprint) values (%s, %s, %s)",
                (worker_id, name, issued.fingerprint),
            )
        operator = _subject(conn, "user", "operator")
        viewer = _subject(conn, "user", "viewer")
        agent = _subject(conn, "agent", "agent")
        set_role(conn, p, operator, "operator", True)
        set_role(conn, p, viewer, "viewer", True)
        set_role(conn, p, agent, "operator", True)
        return Seed(
            project_p=str(p),
            project_q=str(q),
            task_p=_task_of(conn, rev_p),
            task_q=_task_of(conn, rev_q),
            runs_p=tuple(map(str, runs_p)),
            runs_q=tuple(map(str, runs_q)),
            worker_a=pki.worker_a_id,
            worker_b=pki.worker_b_id,
            operator=operator,
            viewer=viewer,
            agent=agent,
        )


@pytest.fixture
def seed(database: PgDatabase, pki: Pki) -> Seed:
    return seed_database(database.dsn(), pki)


# -- row images ----------------------------------------------------------------------------------


async def ql_image(dsn: str) -> dict[str, list[str]]:
    """Every row of every table of schema `ql`, as text, sorted: equal images mean nothing was written."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "select c.relname from pg_catalog.pg_class c join pg_catalog.pg_namespace n on n.oid = c.relnamespace"
            " where n.nspname = 'ql' and c.relkind in ('r', 'p') and not c.relispartition order by 1"
        )
        tables = [str(r[0]) for r in await cur.fetchall()]
        assert "runs" in tables and "security_audit" in tables, tables
        image: dict[str, list[str]] = {}
        for table in tables:
            cur = await conn.execute(sql.SQL("select t::text from {} t order by 1").format(sql.Identifier("ql", table)))
            image[table] = [str(r[0]) for r in await cur.fetchall()]
        return image


def image_diff(before: Mapping[str, list[str]], after: Mapping[str, list[str]]) -> dict[str, int]:
    """Per table, how many rows were added, removed or changed (empty when nothing was written)."""
    diff: dict[str, int] = {}
    for table in sorted(set(before) | set(after)):
        old, new = set(before.get(table, [])), set(after.get(table, []))
        if old != new:
            diff[table] = len(old ^ new)
    return diff


async def audit_rows(dsn: str, route: str) -> list[dict[str, Any]]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "select subject_id::text, project_id::text, permission, decision, reason, request_id"
            " from ql.security_audit where route = %s order by at_ms, id",
            (route,),
        )
        names = ("subject_id", "project_id", "permission", "decision", "reason", "request_id")
        return [dict(zip(names, row, strict=True)) for row in await cur.fetchall()]


# -- the shell, in-process -----------------------------------------------------------------------


@dataclass(frozen=True)
class Shell:
    """Base URLs of the three listeners and what they share."""

    worker_url: str
    user_url: str
    admin_url: str
    db: Database
    secret: bytes
    worker_port: int
    user_port: int
    sealer: Sealer | None = None  # its key-encryption keys (None: no [secrets])


def _port(runner: web.AppRunner) -> int:
    address = runner.addresses[0]
    return int(address[1])


@contextlib.asynccontextmanager
async def serve_shell(
    db: Database, pki: Pki, secret: bytes | None = None, *, sealer: Sealer | None = None
) -> AsyncIterator[Shell]:
    """The worker, user and admin apps over `db`, each on a kernel-chosen loopback port; `sealer`: the shell's
    key-encryption keys for Project secrets (None: a shell.toml without [secrets])."""
    secret = secret if secret is not None else os.urandom(32)
    await db.open()
    runners: list[web.AppRunner] = []
    try:
        sites = (
            (
                make_app("worker", db, ql3w.Keyring(secret), sealer=sealer),
                server_context(pki.server.certificate, pki.server.key, client_ca=pki.ca),
            ),
            (make_app("user", db, sealer=sealer), server_context(pki.server.certificate, pki.server.key)),
            (make_admin_app(db), None),
        )
        for app, ctx in sites:
            runner = web.AppRunner(app, shutdown_timeout=2.0)
            await runner.setup()
            runners.append(runner)
            await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx).start()
        ports = [_port(r) for r in runners]
        yield Shell(
            worker_url=f"https://127.0.0.1:{ports[0]}",
            user_url=f"https://127.0.0.1:{ports[1]}",
            admin_url=f"http://127.0.0.1:{ports[2]}",
            db=db,
            secret=secret,
            worker_port=ports[0],
            user_port=ports[1],
            sealer=sealer,
        )
    finally:
        for runner in reversed(runners):
            await runner.cleanup()
        await db.close()


@pytest.fixture
async def shell(database: PgDatabase, pki: Pki, seed: Seed) -> AsyncIterator[Shell]:
    """The shell as shell.toml with [secrets] configures it: a fresh key-encryption key."""
    async with serve_shell(Database(database.runtime_dsn), pki, sealer=Sealer(os.urandom(32))) as running:
        yield running


# -- log capture ---------------------------------------------------------------------------------


class Capture(logging.Handler):
    """Keeps every formatted record (message, arguments and any exception text)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        self.lines.append(text)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


@dataclass(frozen=True)
class Logs:
    shell: Capture  # logger "qinglong.shell"
    everything: Capture  # the root logger at INFO (aiohttp, asyncio, psycopg, ...)


@pytest.fixture
def logs() -> Iterator[Logs]:
    shell_logger, root = logging.getLogger("qinglong.shell"), logging.getLogger()
    captured = Logs(Capture(), Capture())
    levels = (shell_logger.level, root.level)
    shell_logger.setLevel(logging.INFO)
    root.setLevel(logging.INFO)
    shell_logger.addHandler(captured.shell)
    root.addHandler(captured.everything)
    try:
        yield captured
    finally:
        shell_logger.removeHandler(captured.shell)
        root.removeHandler(captured.everything)
        shell_logger.setLevel(levels[0])
        root.setLevel(levels[1])


# -- clients -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    content_type: str

    def json(self) -> dict[str, Any]:
        data = json.loads(self.body)
        assert isinstance(data, dict), self.body
        return data

    @property
    def code(self) -> str | None:
        if self.content_type != JSON:
            return None
        code = self.json().get("code")
        return code if isinstance(code, str) else None


async def reply_of(response: aiohttp.ClientResponse) -> Reply:
    return Reply(response.status, await response.read(), response.content_type)


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class Offered:
    """A pulled offer, its raw lease token, and the Lease version the Worker holds."""

    offer: dict[str, Any]
    token: str
    lease_version: int = 1

    @property
    def offer_id(self) -> str:
        return str(self.offer["offerId"])

    def fence(self, generation: int = 1) -> dict[str, Any]:
        o = self.offer
        return {
            "workerGeneration": generation,
            "projectId": o["projectId"],
            "runId": o["runId"],
            "attemptId": o["attemptId"],
            "leaseGeneration": o["leaseGeneration"],
            "leaseToken": self.token,
        }

    def lease_control(self, expected_version: int | None = None) -> dict[str, Any]:
        return {
            "schema": LEASE_CONTROL_SCHEMA,
            **self.fence(),
            "offerId": self.offer_id,
            "expectedVersion": self.lease_version if expected_version is None else expected_version,
        }


class WorkerClient:
    """A Worker over one keep-alive TLS 1.3 connection with its client certificate; signs with ql3w."""

    def __init__(self, shell: Shell, worker_id: str, ctx: ssl.SSLContext, *, generation: int = 1) -> None:
        self.shell = shell
        self.worker_id = worker_id
        self.generation = generation
        self.http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=1))
        self.session_id: str | None = None
        self.key: bytes | None = None
        self.session_key_text: str | None = None
        self.authorizations: list[str] = []

    async def __aenter__(self) -> WorkerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.close()

    @property
    def sessions_path(self) -> str:
        return f"{WORKER_BASE}/{self.worker_id}/sessions"

    def path(self, suffix: str) -> str:
        assert self.session_id is not None, "open a session first"
        return f"{self.sessions_path}/{self.session_id}{suffix}"

    async def open(self, capacity: int = 2) -> Reply:
        body = {"schema": SESSION_SCHEMA, "capacity": capacity, "workerGeneration": self.generation}
        reply = await self.send("POST", self.sessions_path, json.dumps(body).encode(), {"Content-Type": JSON})
        if reply.status == 200:
            opened = reply.json()
            self.session_id, self.session_key_text = opened["sessionId"], opened["sessionKey"]
            self.key = b64url_decode(opened["sessionKey"])
        return reply

    def authorization(self, path: str, body: bytes, *, ts: int | None = None, key: bytes | None = None) -> str:
        assert self.session_id is not None and self.key is not None
        header = ql3w.authorization(
            key if key is not None else self.key,
            worker_id=self.worker_id,
            session_id=self.session_id,
            generation=self.generation,
            method="POST",
            path=path,
            body=body,
            now=int(time.time()) if ts is None else ts,
        )
        self.authorizations.append(header)
        return header

    async def post(
        self,
        suffix: str,
        body: bytes | Mapping[str, Any],
        *,
        sign_path: str | None = None,
        sign_body: bytes | None = None,
        ts: int | None = None,
        key: bytes | None = None,
        content_type: str = JSON,
        path: str | None = None,
    ) -> Reply:
        """POST to the session path + `suffix`, signed (by default) exactly for what is sent."""
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        target = path if path is not None else self.path(suffix)
        header = self.authorization(
            sign_path if sign_path is not None else target,
            sign_body if sign_body is not None else raw,
            ts=ts,
            key=key,
        )
        return await self.send("POST", target, raw, {"Authorization": header, "Content-Type": content_type})

    async def send(self, method: str, path: str, data: Any, headers: Mapping[str, str]) -> Reply:
        if isinstance(data, bytes) and len(data) > 256 * 1024:
            data = io.BytesIO(data)  # aiohttp warns about large raw bytes bodies
        async with self.http.request(method, self.shell.worker_url + path, data=data, headers=headers) as resp:
            return await reply_of(resp)

    # -- the protocol, step by step --

    async def pull(self) -> Offered:
        reply = await self.post("/offers:pull", {"schema": OFFER_SCHEMA, "pullId": str(uuid.uuid4())})
        assert reply.status == 200 and reply.json()["status"] == "offered", reply
        data = reply.json()
        return Offered(data["offer"], data["leaseToken"])

    async def activate(self, offered: Offered, phase: str) -> Reply:
        body = {"schema": ACTIVATION_SCHEMA, **offered.fence()}
        return await self.post(f"/offers/{offered.offer_id}/activation/{phase}", body)

    async def renew(self, offered: Offered) -> Reply:
        reply = await self.post("/lease-control", offered.lease_control())
        if reply.status == 200:
            offered.lease_version = int(reply.json()["leaseVersion"])
        return reply

    async def upload(self, offered: Offered, content: bytes, kind: str = "log") -> Reply:
        body = {
            "schema": COMPLETION_SCHEMA,
            **offered.fence(),
            "kind": kind,
            "sha256": hashlib.sha256(content).hexdigest(),
            "size": len(content),
            "contentBase64": base64.b64encode(content).decode("ascii"),
        }
        return await self.post(f"/offers/{offered.offer_id}/artifacts", body)

    async def complete(self, offered: Offered, receipts: Sequence[Mapping[str, Any]], exit_code: int = 0) -> Reply:
        body = {
            "schema": COMPLETION_SCHEMA,
            **offered.fence(),
            "leaseVersion": offered.lease_version,
            "exitCode": exit_code,
            "errorCode": None,
            "artifacts": [{k: r[k] for k in ("artifactId", "sha256", "size")} for r in receipts],
        }
        return await self.post(f"/offers/{offered.offer_id}/completion", body)


@dataclass
class RoundTrip:
    offered: Offered
    replies: dict[str, Reply] = field(default_factory=dict)


async def worker_round_trip(client: WorkerClient, *, renewals: int = 3) -> RoundTrip:
    """open → pull → starting → running → renew x renewals → upload a log → completion; every step 200."""
    opened = await client.open()
    assert opened.status == 200, opened
    trip = RoundTrip(await client.pull())
    for phase in ("starting", "running"):
        reply = await client.activate(trip.offered, phase)
        assert reply.status == 200 and reply.json()["status"] == "applied", reply
        trip.replies[phase] = reply
    for n in range(renewals):
        reply = await client.renew(trip.offered)
        assert reply.status == 200 and reply.json()["status"] == "renewed", reply
        trip.replies[f"renew{n}"] = reply
    upload = await client.upload(trip.offered, b"hello from the task\n")
    assert upload.status == 200 and upload.json()["status"] == "stored", upload
    trip.replies["upload"] = upload
    done = await client.complete(trip.offered, [upload.json()["receipt"]])
    assert done.status == 200 and done.json()["status"] == "completed", done
    assert done.json()["runStatus"] == "succeeded", done
    trip.replies["completion"] = done
    return trip


def user_http(pki: Pki) -> aiohttp.ClientSession:
    """A user-API client trusting the deployment CA (TLS 1.3, no client certificate)."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=pki.client_context()))


@contextlib.asynccontextmanager
async def shell_process(
    config: Path, ports: tuple[int, int, int], dsn: str, *, stderr: int = asyncio.subprocess.PIPE
) -> AsyncIterator[tuple[asyncio.subprocess.Process, Shell]]:
    """`qinglong shell serve --config <config>` as an operator runs it, on `ports` (worker, user, admin),
    healthy; SIGTERM at the end if it still runs. Its cluster secret is the file next to `config`."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "qinglong.cli", "shell", "serve", "--config", str(config), stderr=stderr
    )
    shell = Shell(
        worker_url=f"https://127.0.0.1:{ports[0]}",
        user_url=f"https://127.0.0.1:{ports[1]}",
        admin_url=f"http://127.0.0.1:{ports[2]}",
        db=Database(dsn),  # never opened: the shell under test has its own pools
        secret=(config.parent / "cluster.secret").read_bytes(),
        worker_port=ports[0],
        user_port=ports[1],
    )
    try:
        async with aiohttp.ClientSession() as http:

            async def healthy() -> bool:
                try:
                    async with http.get(f"{shell.admin_url}/healthz") as resp:
                        return resp.status == 200
                except aiohttp.ClientConnectionError:
                    return False

            assert await wait_for(healthy, within=30, interval=0.1)
        yield proc, shell
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.communicate(), 40)


async def user_call(
    http: aiohttp.ClientSession,
    shell: Shell,
    method: str,
    path: str,
    *,
    token: str | None,
    body: Mapping[str, Any] | bytes | None = None,
    content_type: str = JSON,
) -> Reply:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    data: bytes | None = None
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers["Content-Type"] = content_type
    async with http.request(method, shell.user_url + path, data=data, headers=headers) as resp:
        return await reply_of(resp)


# -- a private cluster (statement logging on; tests may stop and start it) ------------------------


@pytest.fixture
def private_database(private_cluster: PrivateCluster) -> Iterator[PgDatabase]:
    """A fresh database on the private cluster; the cluster runs again after the test, whatever it did."""
    db = private_cluster.new_database()
    try:
        yield db
    finally:
        if not private_cluster.cluster.running:
            private_cluster.cluster.start()
        with psycopg.connect(private_cluster.cluster.dsn(), autocommit=True) as conn:
            conn.execute(f"drop database {db.name} with (force)")


async def wait_for(predicate: Any, *, within: float = 5.0, interval: float = 0.02) -> Any:
    """Await `predicate()` until it returns something truthy (returned) or `within` s pass (AssertionError)."""
    deadline = time.monotonic() + within
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within} s")
        await asyncio.sleep(interval)
