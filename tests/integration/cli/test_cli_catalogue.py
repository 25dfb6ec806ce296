"""The catalogue commands (`worker list|disable|enable`, `pool list|lease`, `project list`,
`subject list|disable|enable`, `task list|show|disable|enable`, `role set|revoke`) run as an operator runs them,
as child processes against a fresh database: a table by default and the same fields with --json, names wherever
an id is asked for, a disabled Worker fenced at once (its session closed) and a disabled subject refused by the
user API's admission. Every refusal is one line on stderr, exit 2 (and changes nothing) or 3 for an unreachable
database. The helpers are test_cli's.

Touches: the session cluster (a fresh database per test), child processes.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import Database
from tests.integration.cli.test_cli import UNREACHABLE_DSN, cli, done, ql_text, refused, rows
from tests.integration.db.factories import (
    CERT,
    digest,
    make_project,
    make_revision,
    make_user,
    make_worker,
    open_session,
)

db = pytest.mark.db


def sql(dsn: str, query: str, params: tuple[Any, ...] = ()) -> Any:
    """The one value of a query run as the superuser (autocommit)."""
    found = rows(dsn, query, params)
    return found[0][0] if found else None


def as_json(*args: str) -> Any:
    out = cli(*args, "--json")
    assert out.code == 0 and out.stderr == "", out
    return json.loads(out.stdout)


@db
def test_worker_list_disable_and_enable_by_name_or_id(database: Database) -> None:
    dsn = database.dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        busy, idle = (make_worker(conn) for _ in range(2))
        conn.execute("update ql.workers set name = 'busy' where id = %s", (busy,))
        conn.execute("update ql.workers set name = 'idle', pool = 'gpu' where id = %s", (idle,))
    with psycopg.connect(database.runtime_dsn, autocommit=True) as rt:
        session = open_session(rt, busy, 2).session

    out = cli("worker", "list", "--dsn", dsn)
    assert out.code == 0 and out.stderr == "", out
    lines = out.stdout.splitlines()
    heads = ["ID", "NAME", "POOL", "GENERATION", "STATUS", "ONLINE", "ATTEMPTS", "LAST", "CONTACT", "CERT", "EXPIRES"]
    assert lines[0].split() == heads
    assert [line.split()[1] for line in lines[1:]] == ["busy", "idle"]
    assert lines[1].split()[:7] == [str(busy), "busy", "default", "1", "active", "yes", "0"]
    assert lines[2].split() == [str(idle), "idle", "gpu", "1", "active", "no", "0", "-", "-"]
    listed = as_json("worker", "list", "--dsn", dsn)["workers"]
    assert [(w["workerId"], w["online"], w["status"]) for w in listed[:2]] == [
        (str(busy), True, "active"),
        (str(idle), False, "active"),
    ]
    assert set(listed[0]) == {"workerId", "name", "pool", "generation", "status", "online", "lastContactAtMs",
                              "activeAttempts", "certNotAfterMs"}  # fmt: skip

    # Refusals: one line, exit 2, nothing changed.
    before = ql_text(dsn)
    assert refused(cli("worker", "disable", "--dsn", dsn, "nobody"), 2) == (
        "qinglong: no worker 'nobody' (workers: busy, idle)"
    ), "the refusal names the Workers there are"
    refused(cli("worker", "enable", "--dsn", dsn, str(uuid.uuid4())), 2, "no worker '")
    assert ql_text(dsn) == before

    # Disable by name: the session closes, a new one is refused; enable by id lets it in again.
    done(cli("worker", "disable", "--dsn", dsn, "busy"), rf"worker busy {busy}: disabled, session {session} closed\n")
    assert sql(dsn, "select status from ql.worker_sessions where id = %s", (session,)) == "closed"
    with psycopg.connect(database.runtime_dsn, autocommit=True) as rt:
        opened = rt.execute("select ql_api.worker_session_open_v1(%s, 1, %s, 2)", (busy, digest(CERT))).fetchone()
    assert opened is not None and opened[0] == {"status": "fenced", "reason": "worker_disabled"}
    done(cli("worker", "disable", "--dsn", dsn, str(busy)), rf"worker busy {busy}: disabled \(already\)\n")
    assert as_json("worker", "enable", "--dsn", dsn, str(busy)) == {
        "status": "enabled", "workerId": str(busy), "name": "busy", "changed": True, "closedSessionId": None,
    }  # fmt: skip
    assert sql(dsn, "select status from ql.workers where id = %s", (busy,)) == "active"
    done(cli("worker", "disable", "--dsn", dsn, str(idle)), rf"worker idle {idle}: disabled\n")
    assert sql(dsn, "select status from ql.workers where id = %s", (busy,)) == "active"


@db
def test_project_and_task_lists_and_task_show_by_name_or_id(database: Database) -> None:
    dsn = database.dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        mine, other = make_project(conn, "cat-mine"), make_project(conn, "cat-other")
        make_revision(conn, other, {"argv": ["cat", "secret"]})
    build = sql(dsn, "select ql_api.task_create_v1(%s, 'build', %s) ->> 'taskId'",
                (mine, json.dumps({"argv": ["make", "all"], "pool": "gpu", "maxAttempts": 2})))  # fmt: skip
    sql(dsn, "select ql_api.task_create_v1(%s, 'backup', '{\"argv\": [\"tar\"]}')", (mine,))
    sql(dsn, "select ql_api.task_schedule_set_v1(%s, 'backup', '0 3 * * *', 'UTC', 'skip')", (mine,))

    projects = as_json("project", "list", "--dsn", dsn)["projects"]
    assert [(p["name"], p["tasks"]) for p in projects if p["name"].startswith("cat-")] == [
        ("cat-mine", 2),
        ("cat-other", 1),
    ]
    out = cli("project", "list", "--dsn", dsn)
    assert out.code == 0 and out.stdout.splitlines()[0].split() == [
        "ID",
        "NAME",
        "STATUS",
        "VERSION",
        "TASKS",
        "CREATED",
    ]
    assert any(line.split()[:5] == [str(mine), "cat-mine", "active", "1", "2"] for line in out.stdout.splitlines())

    out = cli("task", "list", "--dsn", dsn, "--project", "cat-mine")
    assert out.code == 0 and out.stderr == "", out
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["ID", "NAME", "STATUS", "POOL", "ARGV", "SCHEDULE"]
    assert [line.split()[1] for line in lines[1:]] == ["backup", "build"]  # never another Project's task
    assert lines[2].split() == [build, "build", "active", "gpu", "make", "all", "-"]
    by_id = as_json("task", "list", "--dsn", dsn, "--project", str(mine))
    assert by_id["project"] == "cat-mine" and [t["name"] for t in by_id["tasks"]] == ["backup", "build"]

    shown = as_json("task", "show", "--dsn", dsn, "--project", "cat-mine", "backup")
    assert shown["schedule"]["cron"] == "0 3 * * *" and len(shown["schedule"]["next"]) == 5
    assert as_json("task", "show", "--dsn", dsn, "--project", str(mine), build)["argv"] == ["make", "all"]
    out = cli("task", "show", "--dsn", dsn, "--project", "cat-mine", "build")
    assert out.code == 0 and "maxAttempts 2" in out.stdout and "schedule    -" in out.stdout, out

    before = ql_text(dsn)
    refused(cli("task", "list", "--dsn", dsn, "--project", "nowhere"), 2, "no project 'nowhere' (projects: cat-mine")
    refused(cli("task", "show", "--dsn", dsn, "--project", "cat-other", "build"), 2, "no task 'build'")
    refused(cli("task", "show", "--dsn", dsn, "--project", "cat-mine", "nothing"), 2, "no task 'nothing'")
    assert ql_text(dsn) == before


@db
def test_task_disable_and_enable_by_names(database: Database) -> None:
    dsn = database.dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        mine, other = make_project(conn, "cat-mine"), make_project(conn, "cat-other")
    job = sql(dsn, "select ql_api.task_create_v1(%s, 'job', '{\"argv\": [\"true\"]}') ->> 'taskId'", (mine,))
    other_job = sql(dsn, "select ql_api.task_create_v1(%s, 'job', '{\"argv\": [\"true\"]}') ->> 'taskId'", (other,))

    before = ql_text(dsn)
    assert refused(cli("task", "disable", "--dsn", dsn, "--project", "cat-mine", "nothing"), 2) == (
        "qinglong: no task 'nothing' (tasks in project cat-mine: job)"
    )
    refused(cli("task", "disable", "--dsn", dsn, "--project", "cat-mine", other_job), 2, "no task '")
    refused(cli("task", "disable", "--dsn", dsn, "--project", "nowhere", "job"), 2, "no project 'nowhere'")
    assert ql_text(dsn) == before

    done(cli("task", "disable", "--dsn", dsn, "--project", "cat-mine", "job"), rf"task job {job}: disabled\n")
    assert rows(dsn, "select id::text, status from ql.tasks order by status") == [
        (other_job, "active"),
        (job, "disabled"),
    ]
    assert as_json("task", "show", "--dsn", dsn, "--project", "cat-mine", "job")["status"] == "disabled"
    done(cli("task", "disable", "--dsn", dsn, "--project", str(mine), job), rf"task job {job}: disabled \(already\)\n")
    assert as_json("task", "enable", "--dsn", dsn, "--project", "cat-mine", "job") == {
        "status": "enabled", "projectId": str(mine), "taskId": job, "name": "job", "changed": True,
    }  # fmt: skip
    assert sql(dsn, "select status from ql.tasks where id = %s", (job,)) == "active"


@db
def test_subject_list_disable_and_roles_by_name(database: Database, tmp_path: Path) -> None:
    dsn = database.dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        make_project(conn, "cat-roles")
        ann = make_user(conn)
        conn.execute("update ql.subjects set name = 'ann' where id = %s", (ann.id,))
        bob = make_user(conn)
        conn.execute("update ql.subjects set name = 'bob' where id = %s", (bob.id,))

    done(cli("role", "set", "--dsn", dsn, "--project", "cat-roles", "--subject", "ann", "--role", "viewer"),
         r"subject ann is viewer in project cat-roles\n")  # fmt: skip
    subjects = as_json("subject", "list", "--dsn", dsn)["subjects"]
    ann_row = next(s for s in subjects if s["subjectId"] == str(ann.id))
    assert ann_row["roles"] == [
        {"projectId": ann_row["roles"][0]["projectId"], "project": "cat-roles", "role": "viewer"}
    ]
    assert ann.token not in json.dumps(subjects) and digest(ann.token).hex() not in json.dumps(subjects)
    out = cli("subject", "list", "--dsn", dsn)
    assert out.code == 0 and any(line.split()[1:] == ["ann", "user", "active", "cat-roles:viewer"]
                                 for line in out.stdout.splitlines()), out  # fmt: skip
    done(cli("role", "set", "--dsn", dsn, "--project", "cat-roles", "--subject", str(ann.id), "--role", "operator"),
         r"subject ann is operator in project cat-roles\n")  # fmt: skip

    before = ql_text(dsn)
    token_file = tmp_path / "ann-again.token"
    refused(cli("subject", "create", "--dsn", dsn, "--name", "ann", "--token-file", str(token_file)),
            2, "fenced (name_taken)")  # fmt: skip
    assert not token_file.exists()  # names are unique: a second 'ann' is refused, and no token is written
    refused(cli("role", "set", "--dsn", dsn, "--project", "nowhere", "--subject", "ann", "--role", "viewer"),
            2, "no project 'nowhere'")  # fmt: skip
    refused(cli("role", "revoke", "--dsn", dsn, "--project", "cat-roles", "--subject", str(bob.id)),
            2, "has no role in project cat-roles")  # fmt: skip
    refused(cli("subject", "disable", "--dsn", dsn, "nobody"), 2, "no subject 'nobody' (subjects: ")
    assert ql_text(dsn) == before

    done(cli("role", "revoke", "--dsn", dsn, "--project", "cat-roles", "--subject", "ann"),
         r"subject ann no longer operator in project cat-roles\n")  # fmt: skip
    assert rows(dsn, "select role, active from ql.role_bindings where subject_id = %s", (ann.id,)) == [
        ("operator", False)
    ]

    done(cli("subject", "disable", "--dsn", dsn, "ann"), rf"subject ann {ann.id}: disabled\n")
    assert sql(dsn, "select status from ql.subjects where id = %s", (ann.id,)) == "disabled"
    done(cli("subject", "enable", "--dsn", dsn, str(ann.id)), rf"subject ann {ann.id}: enabled\n")


@pytest.mark.parametrize(
    "args",
    [
        ("worker", "list"),
        ("worker", "disable", "w"),
        ("worker", "enable", "w"),
        ("project", "list"),
        ("subject", "list"),
        ("subject", "disable", "s"),
        ("subject", "enable", "s"),
        ("task", "list", "--project", "p"),
        ("task", "show", "--project", "p", "t"),
        ("task", "disable", "--project", "p", "t"),
        ("task", "enable", "--project", "p", "t"),
        ("role", "set", "--project", "p", "--subject", "s", "--role", "viewer"),
        ("role", "revoke", "--project", "p", "--subject", "s"),
    ],
)
def test_an_unreachable_database_is_one_line_and_exit_3(args: tuple[str, ...]) -> None:
    refused(cli(*args, "--dsn", UNREACHABLE_DSN), 3, "database unreachable")


@db
def test_pool_lease_set_list_and_clear_and_out_of_range_refused(database: Database) -> None:
    dsn = database.dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        worker = make_worker(conn)
        conn.execute("update ql.workers set pool = 'edge' where id = %s", (worker,))
    before = ql_text(dsn)
    # Out of range: refused by the CLI's own check, before the database (which checks it again: pgTAP).
    for ms, said in (
        ("999", "a Lease length is 1000 to 3600000 ms, not 999"),
        ("3600001", "a Lease length is 1000 to 3600000 ms, not 3600001"),
        ("5m", "not a number of ms: 5m"),
    ):
        out = cli("pool", "lease", "--dsn", dsn, "edge", ms)
        assert out.code == 2 and out.stdout == "" and said in out.stderr and "Traceback" not in out.stderr, out
    refused(cli("pool", "lease", "--dsn", dsn, "Edge", "60000"), 2, "invalid (pool)")
    refused(cli("pool", "lease", "--dsn", dsn, "edge"), 2, "--default")
    assert ql_text(dsn) == before, "the refusals change nothing"

    done(
        cli("pool", "lease", "--dsn", dsn, "edge", "300000"),
        r"pool edge: Lease 300000 ms \(its own\); Attempts claimed from now on get it, running ones keep theirs\n",
    )
    listed = as_json("pool", "list", "--dsn", dsn)
    assert listed["defaultLeaseMs"] == 30000
    assert listed["pools"] == [{"pool": "edge", "leaseMs": 300000, "poolOwn": True, "workers": 1, "liveRuns": 0}]
    table = cli("pool", "list", "--dsn", dsn)
    assert table.code == 0 and table.stdout.splitlines()[1].split() == ["edge", "300000", "pool", "1", "0"], table
    assert as_json("pool", "lease", "--dsn", dsn, "edge", "--default") == {
        "status": "cleared", "pool": "edge", "leaseMs": 30000, "poolOwn": False, "changed": True,
    }  # fmt: skip
    assert sql(dsn, "select count(*) from ql.pool_settings") == 0
