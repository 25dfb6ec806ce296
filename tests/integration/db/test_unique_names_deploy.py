"""Deploying ql/unique_names over a database whose subjects or Workers share names: the deploy stops, names the
duplicated names in one line and creates nothing (no constraint, the change not deployed); once they are renamed
the same deploy succeeds and the names are unique from then on.
Touches: one database of the session cluster (created here, deployed step by step with sqitch, dropped).
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from qinglong import db
from qinglong.devdb import Cluster
from tests.conftest import Database, fresh_database
from tests.integration.db.factories import digest

pytestmark = pytest.mark.db

CHANGE = "ql/unique_names"


def deploy(database: Database, to: str) -> subprocess.CompletedProcess[str]:
    argv = db.sqitch("deploy", "--to", to, database.cluster.sqitch_target(database.name))
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)


@pytest.fixture
def before_change(cluster: Cluster) -> Iterator[Database]:
    """A fresh database deployed up to the change before ql/unique_names."""
    with fresh_database(cluster, deploy_to=f"{CHANGE}^") as made:
        yield made


def insert(conn: psycopg.Connection[Any], statement: str, *params: Any) -> uuid.UUID:
    row = conn.execute(statement, params).fetchone()
    assert row is not None
    new: uuid.UUID = row[0]
    return new


def test_duplicate_names_stop_the_deploy_with_their_names_until_renamed(before_change: Database) -> None:
    with psycopg.connect(before_change.dsn(), autocommit=True) as conn:
        subject = "insert into ql.subjects (kind, name, token_digest) values ('user', 'pat', %s) returning id"
        subjects = [insert(conn, subject, digest(f"tok-{n}")) for n in range(2)]
        worker = "insert into ql.workers (name, cert_fingerprint) values ('edge-1', %s) returning id"
        workers = [insert(conn, worker, digest("c")) for _ in range(3)]

        refused = deploy(before_change, CHANGE)
        assert refused.returncode != 0
        said = refused.stdout + refused.stderr
        assert "ql/unique_names: names are not unique: subjects 'pat' (2); Workers 'edge-1' (3)" in said, said
        constraints = conn.execute(
            "select count(*) from pg_constraint where conname in ('subjects_name_key', 'workers_name_key')"
        ).fetchone()
        assert constraints == (0,), "a refused deploy creates nothing"
        deployed = conn.execute("select count(*) from sqitch.changes where change = %s", (CHANGE,)).fetchone()
        assert deployed == (0,)

        conn.execute("update ql.subjects set name = 'pat-2' where id = %s", (subjects[1],))
        conn.execute("update ql.workers set name = 'edge-2' where id = %s", (workers[1],))
        still = deploy(before_change, CHANGE)
        assert still.returncode != 0
        said = still.stdout + still.stderr
        assert "names are not unique: subjects none; Workers 'edge-1' (2)" in said, said

        conn.execute("update ql.workers set name = 'edge-3' where id = %s", (workers[2],))
        done = deploy(before_change, CHANGE)
        assert done.returncode == 0, done.stdout + done.stderr
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute(
                "insert into ql.subjects (kind, name, token_digest) values ('user', 'pat', %s)", (digest("x"),)
            )
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute("insert into ql.workers (name, cert_fingerprint) values ('edge-2', %s)", (digest("c"),))
