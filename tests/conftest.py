"""Shared pytest fixtures: one real PostgreSQL cluster per session, a template database built
once by `sqitch deploy`, and a fresh database per test cloned from it.

Touches: a temporary folder under /tmp (the cluster), the cluster's databases. fsync is off here
(tests only; benchmarks use their own cluster with fsync on).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from qinglong.db import sqitch
from qinglong.devdb import Cluster

REPO = Path(__file__).resolve().parent.parent
TEMPLATE = "ql_template"


@dataclass(frozen=True)
class Database:
    """One test database: connect as the superuser (fixtures, inspection) or as ql_runtime (the API)."""

    cluster: Cluster
    name: str

    def dsn(self, user: str = "postgres") -> str:
        return f"host={self.cluster.host} port={self.cluster.port} user={user} dbname={self.name}"

    @property
    def runtime_dsn(self) -> str:
        return self.dsn("ql_runtime")


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix="ql-test-", dir="/tmp"))
    root.chmod(0o755)
    c = Cluster(root, fsync=False)
    c.start()
    try:
        yield c
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def template_db(cluster: Cluster) -> str:
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute(f"create database {TEMPLATE}")
    subprocess.run(
        sqitch("deploy", "--quiet", cluster.sqitch_target(TEMPLATE)),
        check=True,
        capture_output=True,
    )
    return TEMPLATE


@contextlib.contextmanager
def fresh_database(
    cluster: Cluster, *, template: str | None = None, deploy_to: str | None = None
) -> Iterator[Database]:
    """A new database, dropped afterwards: a copy of `template`, or deployed by sqitch up to `deploy_to` (a
    change or a release tag: the deploy and upgrade tests start from an older schema than the template's)."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute(f"create database {name}" + (f" template {template}" if template else ""))
    try:
        if deploy_to is not None:
            argv = sqitch("deploy", "--to", deploy_to, cluster.sqitch_target(name))
            done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
            assert done.returncode == 0, done.stdout + done.stderr
        yield Database(cluster, name)
    finally:
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            conn.execute(f"drop database {name} with (force)")


@pytest.fixture
def database(cluster: Cluster, template_db: str) -> Iterator[Database]:
    with fresh_database(cluster, template=template_db) as made:
        yield made


# -- a private cluster (statement logging on; tests may stop and start it) ------------------------
# Shared by the shell's tests (tests/integration/shell: private_database) and the secret-leak engine's test,
# which searches this cluster's log from where its own run began.

PRIVATE_SETTINGS = {"log_statement": "all", "log_min_messages": "info"}


@dataclass
class PrivateCluster:
    cluster: Cluster
    template: str

    def new_database(self) -> Database:
        name = f"s_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.cluster.dsn(), autocommit=True) as conn:
            conn.execute(f"create database {name} template {self.template}")
        return Database(self.cluster, name)


@pytest.fixture(scope="session")
def private_cluster() -> Iterator[PrivateCluster]:
    root = Path(tempfile.mkdtemp(prefix="ql-shpg-", dir="/tmp"))  # postgres must traverse it
    root.chmod(0o755)
    cluster = Cluster(root, fsync=False, preload_cron=False, settings=PRIVATE_SETTINGS)
    cluster.start()
    try:
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            conn.execute("create database shell_template")
        subprocess.run(
            sqitch("deploy", "--quiet", cluster.sqitch_target("shell_template")),
            check=True,
            capture_output=True,
        )
        yield PrivateCluster(cluster, "shell_template")
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def processes_under(root: Path) -> list[int]:
    """Processes whose working folder is inside `root` (a server's backends keep the data folder)."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if cwd == str(root) or cwd.startswith(f"{root}/"):
            found.append(int(entry.name))
    return found
