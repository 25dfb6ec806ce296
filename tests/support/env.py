"""What a run of real processes shares over one running cluster: its addresses, a CA with the shell's server
certificate, a cluster secret, the template database to clone, enrolled Workers' identities, and the real
shell as its own process (`python -m qinglong.cli shell serve`, logging to a file). Touches: the folder it
is given (PKI files, the secret, the shell's config and log), the cluster's databases, loopback ports and
the shell process it starts."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from qinglong.cli import pki
from qinglong.db import sqitch
from qinglong.devdb import Cluster

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = "ql_template"


@dataclass(frozen=True)
class Identity:
    """An enrolled simulated Worker: its id and its own client certificate."""

    worker_id: str
    certificate: Path
    key: Path
    fingerprint: bytes


@dataclass
class Env:
    root: Path
    cluster: Cluster
    certs: Path
    secret: bytes
    secret_file: Path
    settings: dict[str, str] = field(default_factory=dict)
    shell: ShellProcess | None = None

    def dsn(self, db: str, user: str = "postgres") -> str:
        return f"host={self.cluster.host} port={self.cluster.port} user={user} dbname={db}"

    def create_database(self, name: str, template: str = TEMPLATE) -> None:
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute(
                sql.SQL("create database {} template {}").format(sql.Identifier(name), sql.Identifier(template))
            )

    def vacuum_analyze(self, name: str) -> None:
        """What autovacuum would have done by the steady state: fresh statistics, visibility map."""
        with psycopg.connect(self.dsn(name), autocommit=True) as conn:
            conn.execute("vacuum analyze")

    def database_size(self, name: str) -> int:
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            row = conn.execute("select pg_database_size(%s)", (name,)).fetchone()
        assert row is not None
        return int(row[0])

    def ca(self) -> Path:
        return self.certs / "ca.crt"

    def client_context(self, who: Identity) -> ssl.SSLContext:
        """TLS 1.3 only, this Worker's certificate, the deployment CA (as the Worker client does)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.maximum_version = ssl.TLSVersion.TLSv1_3
        ctx.load_verify_locations(cafile=self.ca())
        ctx.load_cert_chain(who.certificate, who.key)
        return ctx


@dataclass(frozen=True)
class Place:
    """A running cluster an engine borrows instead of starting its own, and the database deployed there by
    `sqitch deploy` that the engine's database is copied from (the tests' session clusters: their deploy is
    done once). The engine neither starts nor stops the cluster; it drops the database it made."""

    cluster: Cluster
    template: str

    def new_database(self, prefix: str) -> str:
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.cluster.dsn(), autocommit=True) as conn:
            conn.execute(
                sql.SQL("create database {} template {}").format(sql.Identifier(name), sql.Identifier(self.template))
            )
        return name

    def drop_database(self, name: str) -> None:
        with psycopg.connect(self.cluster.dsn(), autocommit=True) as conn:
            conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))


def start_and_deploy(cluster: Cluster, database: str) -> None:
    """An engine's own cluster: start it and deploy the schema into a new database by `sqitch deploy`."""
    cluster.start()
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(database)))
    subprocess.run(sqitch("deploy", "--quiet", cluster.sqitch_target(database)), check=True, capture_output=True)


def new_env(root: Path, cluster: Cluster, settings: dict[str, str] | None = None) -> Env:
    """An Env over a running cluster: a CA, the shell's server certificate and a cluster secret under `root`."""
    certs = root / "pki"
    pki.init_ca(certs)
    pki.issue_server(certs, ["127.0.0.1"])
    secret_file = root / "cluster.secret"
    secret = os.urandom(32).hex().encode()
    secret_file.write_bytes(secret)
    secret_file.chmod(0o600)
    return Env(root, cluster, certs, secret, secret_file, settings or {})


PORTS_FROM = 10_000  # below the kernel's ephemeral range (32768-60999 by default): no connect() or bind to port 0
PORTS_PER_PROCESS = 4_000  # each test process (pytest-xdist worker) takes ports from its own stretch
_next_port = itertools.count()


def free_port() -> int:
    """A loopback port nothing listens on now, for a process the test starts to bind. From this test process's own
    stretch below the ephemeral range, so neither another test process nor any outgoing connection (whose local port
    is ephemeral) takes it before that process binds it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    base = PORTS_FROM + int(worker[2:] or 0) % 5 * PORTS_PER_PROCESS
    for _ in range(PORTS_PER_PROCESS):
        port = base + next(_next_port) % PORTS_PER_PROCESS
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free loopback port in this test process's stretch")


def start_worker(config: Path, log: Path) -> subprocess.Popen[bytes]:
    """`qinglong-worker run --config CONFIG` as a child, its output appended to `log`."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "qinglong.worker", "run", "--config", str(config)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
        )  # fmt: skip


def stop_process(proc: subprocess.Popen[Any], timeout: float = 30.0) -> None:
    """SIGTERM one process we started, then SIGKILL it after `timeout`."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class ShellProcess:
    """`python -m qinglong.cli shell serve --config …` over one database, logging to a file."""

    def __init__(
        self,
        env: Env,
        database: str,
        pool_size: int = 4,
        name: str = "shell",
        processes: int = 1,
        kek_file: Path | None = None,
    ) -> None:
        self.env = env
        self.pool_size = pool_size
        self.processes = processes
        self.worker_port, self.user_port, self.admin_port = free_port(), free_port(), free_port()
        self.config = env.root / f"{name}.toml"
        self.log = env.root / f"{name}.log"
        c = env.certs
        self.config.write_text(
            (f"processes = {processes}\n" if processes > 1 else "")
            + f'[database]\ndsn = "{env.dsn(database, "ql_runtime")}"\npool_size = {pool_size}\n'
            f'[secret]\ncluster_secret_file = "{env.secret_file}"\n'
            + (f'[secrets]\nkek_file = "{kek_file}"\n' if kek_file is not None else "")
            + f'[worker_listener]\nhost = "127.0.0.1"\nport = {self.worker_port}\n'
            f'certificate = "{c}/server.crt"\nkey = "{c}/server.key"\nclient_ca = "{c}/ca.crt"\n'
            f'[user_listener]\nhost = "127.0.0.1"\nport = {self.user_port}\n'
            f'certificate = "{c}/server.crt"\nkey = "{c}/server.key"\n'
            f'[admin_listener]\nhost = "127.0.0.1"\nport = {self.admin_port}\n'
        )
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def origin(self) -> str:
        return f"https://127.0.0.1:{self.worker_port}"

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def start(self) -> None:
        argv = [sys.executable, "-m", "qinglong.cli", "shell", "serve", "--config", str(self.config)]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        deadline = time.monotonic() + 30
        while not self._healthy():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the shell did not become healthy:\n{tail}")
            time.sleep(0.1)

    def _healthy(self) -> bool:
        try:
            url = f"http://127.0.0.1:{self.admin_port}/healthz"
            with urllib.request.urlopen(url, timeout=1) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            self.proc = None

    def restart(self) -> None:
        """A fresh process, hence fresh pool connections: after seeding and ANALYZE no measured connection
        keeps plans made while the tables were empty."""
        self.stop()
        self.start()
