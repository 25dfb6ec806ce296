"""The benchmarks' own cluster and the fixture rows they write into it: one fresh PostgreSQL cluster with
fsync on (pg_stat_statements preloaded, no pg_cron), the schema deployed once by sqitch into a template
database with hour-long TTLs, enrolled simulated Workers, Tasks and set-based queued Runs.

Touches: a temporary folder under /tmp (removed at the end), the cluster's processes and databases. Fixture
rows (projects, tasks, queued Runs, intents) are written by the superuser, set-based; what is measured goes
through ql_api as ql_runtime or ql_scheduler, or through the shell.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from qinglong.cli import pki
from qinglong.db import sqitch
from qinglong.devdb import Cluster
from tests.support.env import TEMPLATE, Env, Identity, new_env
from tests.support.progress import say

# Idle simulated Workers must not be fenced between phases (an hour-long session, offer and Lease TTL: an
# Attempt ACKed running keeps its offer's expiry until its first renewal, and (a) holds 128 of them while
# its earlier phases renew fewer); a TTL is a number a renewal writes, it does not change the work it does.
BENCH_SETTINGS = {"session_ttl_ms": 3_600_000, "offer_ttl_ms": 3_600_000, "lease_ttl_ms": 3_600_000}

# track_wal_io_timing: pg_stat_wal times each WAL fsync (for the fsync columns); fsync stays on.
PG_SETTINGS = {
    "track_wal_io_timing": "on",
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track": "top",
    "pg_stat_statements.max": "5000",
}


@contextlib.contextmanager
def environment() -> Iterator[Env]:
    """A fresh cluster (fsync on, no pg_cron: nothing converges behind the benchmarks' back), the
    schema in the template database, a CA and the shell's certificate. Everything goes at the end."""
    root = Path(tempfile.mkdtemp(prefix="qinglong-bench-", dir="/tmp"))
    root.chmod(0o755)
    # pg_stat_statements (preloaded; its view lives in the `postgres` database): the per-call-type tables.
    cluster = Cluster(root / "pg", fsync=True, preload_cron=False, settings=PG_SETTINGS)
    env: Env | None = None
    try:
        say(f"PostgreSQL in {root / 'pg'} (fsync on): initdb and start")
        cluster.start()
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            conn.execute("create extension pg_stat_statements")
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(TEMPLATE)))
            shown = conn.execute(
                "select name, setting from pg_settings where name = any(%s) order by name",
                (
                    [
                        "fsync",
                        "synchronous_commit",
                        "full_page_writes",
                        "wal_sync_method",
                        "shared_buffers",
                        "max_connections",
                        "wal_level",
                        "track_wal_io_timing",
                        "shared_preload_libraries",
                    ],
                ),
            ).fetchall()
        say("sqitch deploy into the template database")
        subprocess.run(
            sqitch("deploy", "--quiet", cluster.sqitch_target(TEMPLATE)),
            check=True,
            capture_output=True,
        )
        with psycopg.connect(cluster.dsn(TEMPLATE), autocommit=True) as conn:
            assignments = sql.SQL(", ").join(
                sql.SQL("{} = {}").format(sql.Identifier(k), sql.Literal(v)) for k, v in BENCH_SETTINGS.items()
            )
            conn.execute(sql.SQL("update ql.settings set {}").format(assignments))
        env = new_env(root, cluster, {str(k): str(v) for k, v in shown})
        yield env
    finally:
        if env is not None and env.shell is not None:
            env.shell.stop()
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def enroll(env: Env, conn: psycopg.Connection[Any], count: int, pool: str, prefix: str) -> list[Identity]:
    """`count` Workers of `pool`, each with its own client certificate, enrolled by the operator
    function (generation 1)."""
    out: list[Identity] = []
    for i in range(count):
        worker_id = str(uuid.uuid4())
        issued = pki.issue_worker(env.certs, worker_id, name=f"{prefix}-{i}")
        row = conn.execute(
            "select ql_api.worker_enroll_v1(%s, %s, %s, %s)", (worker_id, f"{prefix}-{i}", pool, issued.fingerprint)
        ).fetchone()
        assert row is not None and row[0]["status"] == "enrolled", row
        out.append(Identity(worker_id, issued.certificate, issued.key, issued.fingerprint))
    return out


@dataclass(frozen=True)
class TaskRef:
    project_id: str
    task_id: str
    revision_id: str
    pool: str


def make_task(conn: psycopg.Connection[Any], project: str, name: str, plan: dict[str, Any]) -> TaskRef:
    """A Project (created once per name) and a Task whose current revision has `plan` (operator functions)."""
    row = conn.execute("select ql_api.project_create_v1(%s)", (project,)).fetchone()
    assert row is not None
    project_id = str(row[0]["projectId"])
    row = conn.execute("select ql_api.task_create_v1(%s, %s, %s)", (project_id, name, Jsonb(plan))).fetchone()
    assert row is not None and row[0]["status"] in ("created", "revised"), row
    return TaskRef(project_id, str(row[0]["taskId"]), str(row[0]["revisionId"]), str(plan.get("pool", "default")))


def queue_runs(conn: psycopg.Connection[Any], task: TaskRef, count: int) -> None:
    """`count` queued Runs of the task's current revision, each with its run.queued event (set-based,
    one transaction), queued in insertion order."""
    with conn.transaction():
        conn.execute(
            "create temporary table new_runs on commit drop as"
            " with ins as (insert into ql.runs (project_id, task_id, task_revision_id, pool, status,"
            "   queued_at_ms, created_at_ms)"
            " select t.project_id, t.task_id, t.id, %s, 'created', ql.now_ms() + g, ql.now_ms()"
            " from ql.task_execution_revisions t cross join generate_series(1, %s) g where t.id = %s"
            " returning id) select id from ins",
            (task.pool, count, task.revision_id),
        )
        row = conn.execute(
            "select count(ql.run_event(q.id, 'queued', 'run.queued', 'system', null, null, '{}', ql.now_ms(),"
            " 'run.queued:' || q.id::text)) from new_runs q"
        ).fetchone()
    assert row is not None and row[0] == count, row
