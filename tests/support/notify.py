"""Notifications on real parts, shared by tests/integration/test_notify_dispatcher.py and bench/notify.py: a webhook
receiver on loopback (aiohttp) that verifies every signature and counts deliveries by their idempotency key, and
can go down (its port closed) and come back; a Project with a sealed secret and a webhook rule; Runs ended failed
through the real lifecycle functions; the dispatcher as a real process (`qinglong notify serve`).

Touches: a loopback port, the test database (fixture rows written as the superuser, like tests/integration/db/
factories), a folder for the dispatcher's files, the dispatcher process.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from aiohttp import web

from qinglong.shell import notify_format
from qinglong.shell.sealing import Sealer, new_kek
from tests.integration.db.factories import (
    activate,
    complete,
    lease_version,
    make_project,
    make_revision,
    make_runs,
    make_user,
    make_worker,
    open_session,
    pull,
)

SECRET_NAME = "HOOK_KEY"  # noqa: S105 - a secret's name, not its value


@dataclass
class Receiver:
    """A webhook endpoint on 127.0.0.1: answers 204 to a request whose signature verifies under `key` (401
    otherwise), after `delay` seconds; counts each delivery id and remembers when (wall clock) each first arrived."""

    key: bytes
    delay: float = 0.0
    port: int = 0
    seen: Counter[str] = field(default_factory=Counter)
    first_at: dict[str, float] = field(default_factory=dict)
    bad_signatures: int = 0
    inflight: int = 0
    is_down: bool = False
    bodies: dict[str, dict[str, Any]] = field(default_factory=dict)
    _runner: web.AppRunner | None = None
    _site: web.TCPSite | None = None

    async def _hook(self, request: web.Request) -> web.Response:
        if self.is_down:  # a request that raced the close: as if it never arrived
            return web.Response(status=503, headers={"Connection": "close"})
        body = await request.read()
        if not notify_format.verify(self.key, request.headers.get(notify_format.TIMESTAMP_HEADER),
                                    request.headers.get(notify_format.SIGNATURE_HEADER), body):  # fmt: skip
            self.bad_signatures += 1
            return web.Response(status=401)
        self.inflight += 1
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
        finally:
            self.inflight -= 1
        delivery = request.headers[notify_format.DELIVERY_HEADER]
        self.seen[delivery] += 1
        self.first_at.setdefault(delivery, time.time())
        self.bodies[delivery] = json.loads(body)
        return web.Response(status=204)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/hook", self._hook)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self._runner.setup()
        await self.up()

    async def up(self) -> None:
        assert self._runner is not None
        self.is_down = False
        self._site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await self._site.start()
        if self.port == 0:
            server = self._site._server
            assert isinstance(server, asyncio.base_events.Server)
            self.port = server.sockets[0].getsockname()[1]

    async def down(self) -> None:
        """Close the port and every connection a client kept alive: connections are refused until `up`."""
        assert self._site is not None and self._runner is not None and self._runner.server is not None
        self.is_down = True
        await self._site.stop()
        await self._runner.server.shutdown(0.1)
        self._site = None

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in self.seen.values())


@dataclass(frozen=True)
class Setup:
    """A Project whose webhook rule `hook` notifies run.failed to the receiver, keyed by a sealed secret."""

    project: uuid.UUID
    revision: uuid.UUID
    pool: str
    kek_file: Path
    key: bytes


def prepare(conn: psycopg.Connection[Any], folder: Path, url: str) -> Setup:
    """The Project, its secret (sealed under a fresh key file in `folder`) and the rule, as the superuser."""
    kek_text = new_kek()
    kek_file = folder / "secrets.kek"
    kek_file.write_text(kek_text)
    kek_file.chmod(0o600)
    sealer = Sealer(bytes.fromhex(kek_text.strip()))
    key = os.urandom(32).hex().encode()
    pool = f"ntf-{uuid.uuid4().hex[:8]}"
    project = make_project(conn)
    revision = make_revision(conn, project, {"argv": ["false"], "pool": pool})
    user = make_user(conn)
    conn.execute("insert into ql.role_bindings (project_id, subject_id, role) values (%s, %s, 'operator')",
                 (project, user.id))  # fmt: skip
    version_id = str(uuid.uuid4())
    sealed = sealer.seal(key, project_id=str(project), name=SECRET_NAME, version_id=version_id)
    row = conn.execute(
        "insert into ql.secrets (project_id, name, current_version, created_at_ms, updated_at_ms)"
        " values (%s, %s, 1, ql.now_ms(), ql.now_ms()) returning id",
        (project, SECRET_NAME),
    ).fetchone()
    assert row is not None
    conn.execute(
        "insert into ql.secret_versions (id, secret_id, version, size, kek_id, wrapped_key, nonce, ciphertext,"
        " created_by, created_at_ms) values (%s, %s, 1, %s, %s, %s, %s, %s, %s, ql.now_ms())",
        (version_id, row[0], len(key), sealed.kek_id, sealed.wrapped_key, sealed.nonce, sealed.ciphertext, user.id),
    )
    versions = conn.execute(
        "select p.version, b.version from ql.projects p join ql.role_bindings b on b.project_id = p.id"
        " where p.id = %s and b.subject_id = %s",
        (project, user.id),
    ).fetchone()
    assert versions is not None
    made = conn.execute(
        "select ql_api.notify_rule_set_v1(%s, %s, 'hook', '{run.failed}', 'webhook', %s, %s, null, %s, %s)",
        (user.id, project, url, SECRET_NAME, *versions),
    ).fetchone()
    assert made is not None and made[0]["status"] == "created", made
    return Setup(project, revision, pool, kek_file, key)


def fail_runs(conn: psycopg.Connection[Any], runtime_dsn: str, setup: Setup, count: int) -> list[uuid.UUID]:
    """`count` Runs of the Project ended failed through the Worker's real calls (pull, starting, running,
    completion with exit 1): each completion's transaction writes its outbox row."""
    runs = make_runs(conn, setup.revision, count)
    worker_id = make_worker(conn, setup.pool)
    with psycopg.connect(runtime_dsn, autocommit=True) as rt:
        worker = open_session(rt, worker_id, min(1024, max(1, count)))
        for _ in runs:
            offer = pull(rt, worker)
            assert activate(rt, worker, offer, "starting")["status"] == "applied"
            assert activate(rt, worker, offer, "running")["status"] == "applied"
            ended = complete(rt, worker, offer, lease_version(conn, offer), 1)
            assert ended["runStatus"] == "failed", ended
    return runs


def outbox_ids(conn: psycopg.Connection[Any], project: uuid.UUID) -> set[str]:
    return {str(r[0]) for r in conn.execute("select id from ql.notify_outbox where project_id = %s", (project,))}


def states(conn: psycopg.Connection[Any], project: uuid.UUID) -> Counter[str]:
    rows = conn.execute("select state, count(*) from ql.notify_outbox where project_id = %s group by 1", (project,))
    return Counter({r[0]: r[1] for r in rows})


@dataclass
class DispatcherProcess:
    """`qinglong notify serve` in a process of its own (logged in as ql_notify), its log in a file."""

    config: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @staticmethod
    def write_config(folder: Path, dsn: str, kek_file: Path, **dispatch: float | int) -> Path:
        lines = ["[database]", f'dsn = "{dsn}"', "", "[secrets]", f'kek_file = "{kek_file.name}"', "", "[dispatch]"]
        lines += ["loopback_receivers = true"]  # the tests' receivers listen on loopback
        lines += [f"{k} = {v}" for k, v in dispatch.items()]
        path = folder / "notify.toml"
        path.write_text("\n".join(lines) + "\n")
        return path

    def start(self) -> None:
        out = self.log.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "qinglong.cli", "notify", "serve", "--config", str(self.config)],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        out.close()

    def kill(self) -> None:
        """SIGKILL, whatever it is doing."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> int:
        """SIGTERM, and its exit code (it ends after the deliveries in flight)."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process is not None else 0
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
            return -9
