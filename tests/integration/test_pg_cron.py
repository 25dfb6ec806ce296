"""The pg_cron schedule changes (ql/converge_schedule, ql/retention_schedule, ql/schedule_tick_schedule) on a real
PostgreSQL with pg_cron 1.4: where pg_cron serves the database, `sqitch deploy` creates exactly one job that runs
`CALL ql_api.converge()` as ql_scheduler every minute (one that runs `CALL ql_api.retain()` as ql_scheduler every
five minutes, and one that runs `CALL ql_api.schedule_tick()` every minute), and a real job run cancels a queued Run
that carries a cancel intent and, in the same cycle, enqueues the due fire time of a task scheduled every minute
(ql_api.schedule_fire_v1), while the tick fires a task scheduled every two seconds (6 fields) within a second of
each fire time;
where pg_cron serves another database the change deploys and verifies cleanly without a job; and
`sqitch revert` removes the job.

Touches: one throw-away cluster in a fresh 0755 folder under /tmp (pg_cron preloaded for database
"qinglong"), its processes (postgres, sqitch); it is stopped and removed. Waits up to 75 s for pg_cron.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from qinglong import db
from qinglong.devdb import Cluster
from tests.conftest import processes_under

pytestmark = [pytest.mark.db, pytest.mark.cron]

REPO = Path(__file__).resolve().parents[2]
TMP = Path("/tmp")  # noqa: S108  (world-traversable, unlike pytest's tmp_path)
CRON_DB = "qinglong"
OTHER_DB = "qinglong_side"
JOB = "qinglong-converge"
RETENTION_JOB = (
    "qinglong-retention",
    "2-59/5 * * * *",
    "CALL ql_api.retain()",
    CRON_DB,
    "ql_scheduler",
    True,
)
TICK_JOB = ("qinglong-schedule", "* * * * *", "CALL ql_api.schedule_tick()", CRON_DB, "ql_scheduler", True)
FIXED_EXECUTOR = "00000000-0000-4000-8000-000000000001"
POLL_S = 2.0
WAIT_S = 75.0  # pg_cron 1.4 has minute granularity


def one(conn: psycopg.Connection[Any], sql: str, args: tuple[Any, ...] = ()) -> Any:
    row = conn.execute(sql, args).fetchone()
    assert row is not None, sql
    return row[0]


def sqitch(*args: str) -> str:
    result = subprocess.run(db.sqitch(*args), capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, f"sqitch {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout + result.stderr


def deploy_and_verify(target: str) -> None:
    sqitch("deploy", "--quiet", target)
    sqitch("verify", target)


def log_tail(cluster: Cluster, lines: int = 40) -> str:
    text = cluster.log_file.read_text(encoding="utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


def cron_jobs(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute(
        "select jobname, schedule, command, database, username, active from cron.job order by jobid"
    ).fetchall()


def schedule_task(conn: psycopg.Connection[Any], name: str, cron: str) -> tuple[Any, int]:
    """A task scheduled by `cron` (overlap allow) through the operator functions; its id and first fire time (ms)."""
    project = one(conn, "select ql_api.project_create_v1(%s) ->> 'projectId'", (f"cron-{name}",))
    task = one(conn, "select ql_api.task_create_v1(%s, %s, '{\"argv\": [\"true\"]}') ->> 'taskId'", (project, name))
    result = one(conn, "select ql_api.task_schedule_set_v1(%s, %s, %s, 'UTC', 'allow')", (project, name, cron))
    assert result["status"] == "set", result
    return task, result["nextFireAtMs"]


def queue_cancelled_run(conn: psycopg.Connection[Any]) -> Any:
    """One queued Run (no Attempt) that carries a user's durable cancel intent, nothing converged yet."""
    with conn.transaction():
        project = one(conn, "insert into ql.projects (name) values ('cron') returning id")
        task = one(conn, "insert into ql.tasks (project_id, name) values (%s, 'nightly') returning id", (project,))
        revision = one(
            conn,
            "insert into ql.task_execution_revisions (task_id, project_id, plan_json, executor_revision_id)"
            " values (%s, %s, %s, %s) returning id",
            (task, project, json.dumps({"argv": ["true"]}), FIXED_EXECUTOR),
        )
        conn.execute("update ql.tasks set current_revision_id = %s where id = %s", (revision, task))
        run = one(
            conn,
            "insert into ql.runs (project_id, task_id, task_revision_id, pool, status, queued_at_ms,"
            " created_at_ms) values (%s, %s, %s, 'default', 'created', ql.now_ms(), ql.now_ms())"
            " returning id",
            (project, task, revision),
        )
        conn.execute(
            "select ql.run_event(%s, 'queued', 'run.queued', 'system', null, null, '{}', ql.now_ms(),"
            " 'run.queued:' || %s::text)",
            (run, run),
        )
        conn.execute("select 1 from ql.runs where id = %s for no key update", (run,))
        assert one(conn, "select ql.run_cancel_intent(%s, 'user', 'user', null, ql.now_ms())", (run,)) == 2
    return run


@pytest.fixture
def cron_cluster() -> Iterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix="ql-cron-", dir=TMP))
    root.chmod(0o755)
    # pg_cron 1.4 runs each job over libpq as the job's user (trusted on loopback here). The server
    # listens on 127.0.0.1 only; the default cron.host "localhost" works only while it resolves
    # there (or libpq falls back from ::1), so pin it.
    c = Cluster(root, fsync=False, preload_cron=True, cron_database=CRON_DB, settings={"cron.host": "127.0.0.1"})
    try:
        c.start()
        yield c
        c.stop()
        assert processes_under(root) == [], f"processes left in {root}"
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_converge_schedule_runs_as_ql_scheduler_and_reverts(cron_cluster: Cluster) -> None:
    cluster = cron_cluster
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        assert one(conn, "show cron.database_name") == CRON_DB
        assert "pg_cron" in one(conn, "show shared_preload_libraries")
        conn.execute(f"create database {CRON_DB}")
        conn.execute(f"create database {OTHER_DB}")

    # -- pg_cron serves this database: exactly one job, as ql_scheduler --------------------------
    sqitch("deploy", "--quiet", cluster.sqitch_target(CRON_DB))
    with psycopg.connect(cluster.dsn(CRON_DB), autocommit=True) as conn:
        assert cron_jobs(conn) == [
            (JOB, "* * * * *", "CALL ql_api.converge()", CRON_DB, "ql_scheduler", True),
            RETENTION_JOB,
            TICK_JOB,
        ]
        job_id = one(conn, "select jobid from cron.job where jobname = %s", (JOB,))
        run = queue_cancelled_run(conn)
        scheduled_task, fire_at_ms = schedule_task(conn, "every-minute", "* * * * *")
        seconds_task, _ = schedule_task(conn, "every-two-seconds", "*/2 * * * * *")
        queued_at: datetime = one(conn, "select clock_timestamp()")
        assert one(conn, "select status::text from ql.runs where id = %s", (run,)) == "queued"

        # -- a real job run converges the Run and fires the schedule ------------------------------
        # While pg_cron's minute comes round, the other database is deployed and verified (checked below).
        other = ThreadPoolExecutor(max_workers=1)
        other_deployed = other.submit(deploy_and_verify, cluster.sqitch_target(OTHER_DB))
        started = time.monotonic()
        details: list[tuple[Any, ...]] = []
        status = "queued"
        fired: list[tuple[Any, ...]] = []
        while True:
            details = conn.execute(
                "select runid, status, return_message, start_time, end_time from cron.job_run_details"
                " where jobid = %s order by runid",
                (job_id,),
            ).fetchall()
            status = one(conn, "select status::text from ql.runs where id = %s", (run,))
            fired = conn.execute(
                "select fire_at_ms, outcome, run_id from ql.schedule_fires where task_id = %s", (scheduled_task,)
            ).fetchall()
            failed = [d for d in details if d[1] == "failed"]
            assert not failed, f"pg_cron job failed: {failed}\n--- cluster log:\n{log_tail(cluster)}"
            done = [d for d in details if d[1] == "succeeded" and d[3] is not None and d[3] >= queued_at]
            if done and status == "cancelled" and fired:
                break
            if time.monotonic() - started > WAIT_S:
                raise AssertionError(
                    f"no succeeded pg_cron run cancelled the Run and fired the schedule within {WAIT_S:.0f} s: "
                    f"run {status}, fires {fired}, job runs {details}\n--- cluster log:\n{log_tail(cluster)}"
                )
            time.sleep(POLL_S)
        waited = time.monotonic() - started
        print(
            f"pg_cron: job run {done[0][0]} {done[0][1]} ({done[0][2]!r}) after {waited:.1f} s; "
            f"job runs: {len(details)}"
        )

        events = conn.execute(
            "select sequence, type, actor_kind::text from ql.run_events where run_id = %s order by sequence",
            (run,),
        ).fetchall()
        assert events == [
            (1, "run.queued", "system"),
            (2, "run.cancel_requested", "user"),
            (3, "run.cancelled", "reconciler"),
        ], events
        assert conn.execute("select version, event_sequence from ql.runs where id = %s", (run,)).fetchone() == (4, 3)

        # The scheduled task's first fire time became exactly one queued Run, by the system, naming that fire time.
        assert [(f[0], f[1]) for f in fired] == [(fire_at_ms, "enqueued")], fired
        scheduled = conn.execute(
            "select r.id, r.status::text, e.type, e.actor_kind::text, (e.payload ->> 'scheduledFireAtMs')::bigint"
            " from ql.runs r join ql.run_events e on e.run_id = r.id where r.task_id = %s",
            (scheduled_task,),
        ).fetchall()
        assert scheduled == [(fired[0][2], "queued", "run.queued", "system", fire_at_ms)], scheduled
        assert (
            one(conn, "select next_fire_at_ms from ql.task_schedules where task_id = %s", (scheduled_task,))
            > fire_at_ms
        )

        # The tick's run of that minute fires the 6-field schedule once per fire time, each within a second (its
        # first pass folds the fire times missed since the schedule was set into one: those are left out).
        ticks: list[tuple[Any, ...]] = []
        while len(ticks) < 3:
            assert time.monotonic() - started < WAIT_S + 20, f"the tick fired {ticks} after its first pass"
            time.sleep(POLL_S)
            ticks = conn.execute(
                "select f.fire_at_ms, f.decided_at_ms - f.fire_at_ms, f.outcome from ql.schedule_fires f"
                " where f.task_id = %s and f.fire_at_ms > 1000 + (select extract(epoch from min(d.start_time)) * 1000"
                "   from cron.job_run_details d join cron.job j on j.jobid = d.jobid where j.jobname = %s)"
                " order by 1",
                (seconds_task, TICK_JOB[0]),
            ).fetchall()
        assert [t[0] - ticks[0][0] for t in ticks] == [2000 * n for n in range(len(ticks))], ticks
        assert all(0 <= t[1] <= 1000 and t[2] == "enqueued" for t in ticks), ticks

    # -- pg_cron serves another database: deploys and verifies cleanly, no job -------------------
    other_deployed.result()  # its deploy and verify (started above), or their failure
    other.shutdown()
    with psycopg.connect(cluster.dsn(OTHER_DB), autocommit=True) as conn:
        assert one(conn, "select to_regclass('cron.job') is null") is True
        assert one(conn, "select count(*) from pg_extension where extname = 'pg_cron'") == 0
        assert one(conn, "select to_regprocedure('ql_api.converge(integer, integer, bigint)') is not null")
    with psycopg.connect(cluster.dsn(CRON_DB), autocommit=True) as conn:
        assert [j[3] for j in cron_jobs(conn)] == [CRON_DB, CRON_DB, CRON_DB]
    sqitch("verify", cluster.sqitch_target(CRON_DB))

    # -- revert removes the job (and is harmless where there is none) ----------------------------
    # converge was reworked after @v0.1.0: name the instance whose job the later change created.
    sqitch("revert", "--to", "ql_api/converge@v0.1.0", "-y", cluster.sqitch_target(CRON_DB))
    sqitch("revert", "--to", "ql_api/converge@v0.1.0", "-y", cluster.sqitch_target(OTHER_DB))
    with psycopg.connect(cluster.dsn(CRON_DB), autocommit=True) as conn:
        assert cron_jobs(conn) == []
        assert one(conn, "select count(*) from pg_extension where extname = 'pg_cron'") == 1
    sqitch("verify", cluster.sqitch_target(CRON_DB))
