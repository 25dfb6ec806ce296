"""`qinglong task create --schedule` and `qinglong task schedule` run as an operator runs them, as child
processes against a fresh database: a task created with its schedule in one transaction, the next fire times
printed as the database computes them (local time with offset, across a DST change), a schedule changed,
shown after a fire and cleared. Every refusal is one line on stderr, exit 2 for bad usage or a refused
request and 3 for an unreachable database, and changes nothing (a task whose schedule is refused is not
created either). The helpers are test_cli's.

Touches: the session cluster (a fresh database per test), child processes.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from tests.conftest import Database
from tests.integration.cli.test_cli import (
    SOME_ID,
    UNREACHABLE_DSN,
    UUID,
    Out,
    a_project,
    cli,
    done,
    ql_text,
    refused,
    rows,
)

db = pytest.mark.db


def shown(dsn: str, project: str, name: str, count: int = 5) -> dict[str, Any]:
    """What the database says about the schedule (the operator function the CLI prints)."""
    result = rows(dsn, "select ql_api.task_schedule_show_v1(%s, %s, %s)", (project, name, count))[0][0]
    assert isinstance(result, dict)
    return result


def said(out: Out) -> Out:
    """`task create --verbose`: the task id alone on stdout; its sentence (on stderr) as if it were stdout."""
    assert re.fullmatch(rf"{UUID}\n", out.stdout), out
    return Out(out.code, out.stderr, "")


def next_lines(answer: dict[str, Any]) -> str:
    return "".join(f"  next  {n['local']}\n" for n in answer["next"])


@db
def test_task_create_with_a_schedule_stores_both_and_prints_the_next_fire_times(database: Database) -> None:
    dsn = database.dsn()
    project = a_project(dsn, "cli-sched")
    out = cli(
        "task", "create", "--dsn", dsn, "--project", project, "--name", "backup", "--schedule", "*/5 * * * *",
        "--timezone", "Europe/Berlin", "--overlap", "allow", "--verbose", "--", "sh", "-c", "true",
    )  # fmt: skip
    out = said(out)
    answer = shown(dsn, project, "backup")
    match = done(
        out,
        rf"task backup: created ({UUID}) \(revision {UUID}\)\n"
        rf"task backup: schedule set: '\*/5 \* \* \* \*' Europe/Berlin, overlap allow\n"
        + "".join(r"  next  \d{4}-\d\d-\d\dT\d\d:[0-5][05]:00\+0[12]:00\n" for _ in range(5)),
    )
    assert out.stdout.endswith(next_lines(answer)), "the fire times printed are the database's"
    assert rows(dsn, "select task_id::text, cron, timezone, overlap from ql.task_schedules") == [
        (match[1], "*/5 * * * *", "Europe/Berlin", "allow")
    ]

    # Without --timezone and --overlap: UTC and skip.
    out = cli(
        "task", "create", "--dsn", dsn, "--project", project, "--name", "daily", "--schedule", "@daily",
        "--verbose", "--", "true",
    )  # fmt: skip
    out = said(out)
    daily = r"(  next  \d{4}-\d\d-\d\dT00:00:00\+00:00\n){5}"
    done(
        out,
        rf"task daily: created {UUID} \(revision {UUID}\)\n"
        rf"task daily: schedule set: '@daily' UTC, overlap skip\n{daily}",
    )


@db
def test_task_schedule_sets_shows_changes_and_clears(database: Database) -> None:
    dsn = database.dsn()
    project = a_project(dsn, "cli-sched-2")
    done(
        cli("task", "create", "--dsn", dsn, "--project", project, "--name", "report", "--", "true"),
        rf"{UUID}\n",
    )
    base = ("--dsn", dsn, "--project", project, "--name", "report")

    done(cli("task", "schedule", *base, "--show"), r"task report: no schedule\n")
    out = cli("task", "schedule", *base, "--cron", "30 2 * * *", "--timezone", "America/New_York", "--count", "3")
    heading = r"task report: schedule set: '30 2 \* \* \*' America/New_York, overlap skip\n"
    done(out, heading + next_lines(shown(dsn, project, "report", 3)))  # New York's offsets have no "+"
    before = ql_text(dsn)
    out = cli("task", "schedule", *base, "--cron", "30 2 * * *", "--timezone", "America/New_York", "--count", "1")
    done(
        out,
        r"task report: schedule unchanged: '30 2 \* \* \*' America/New_York, overlap skip\n"
        r"  next  \S+T02:30:00-0[45]:00\n",
    )
    assert ql_text(dsn) == before, "unchanged writes nothing"

    # A fire time handled by the scheduler shows as the last one, with its Run.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("update ql.task_schedules set next_fire_at_ms = 1730619000000")  # 2024-11-03T02:30-05:00
    with psycopg.connect(database.dsn("ql_scheduler"), autocommit=True) as sched:
        sched.execute("select ql_api.schedule_fire_v1(8)")
    run = rows(dsn, "select id::text from ql.runs")[0][0]
    out = cli("task", "schedule", *base, "--show", "--count", "2")
    done(
        out,
        r"task report: '30 2 \* \* \*' America/New_York, overlap skip\n"
        r"  next  \S+T02:30:00-0[45]:00\n  next  \S+T02:30:00-0[45]:00\n"
        rf"  last  2024-11-03T02:30:00-05:00  enqueued  run {run}  \(caught up\)\n",
    )

    out = cli("task", "schedule", *base, "--cron", "30 2 * * *", "--timezone", "America/New_York", "--overlap", "allow")
    assert out.code == 0 and "schedule set: '30 2 * * *' America/New_York, overlap allow" in out.stdout, out
    done(cli("task", "schedule", *base, "--clear"), r"task report: schedule cleared, no schedule\n")
    done(cli("task", "schedule", *base, "--clear"), r"task report: schedule unchanged, no schedule\n")
    assert rows(dsn, "select count(*) from ql.task_schedules") == [(0,)]
    assert rows(dsn, "select count(*) from ql.schedule_fires") == [(1,)], "the record of what fired stays"


@db
@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param(("--cron", "61 * * * *"), "task_schedule_set_v1: invalid (cron)", id="minute 61"),
        pytest.param(("--cron", "* * * *"), "task_schedule_set_v1: invalid (cron)", id="four fields"),
        pytest.param(("--cron", "0 0 30 2 *"), "task_schedule_set_v1: invalid (cron_never_fires)", id="February 30"),
        pytest.param(("--cron", "* * * * *", "--timezone", "Mars/Base"), "invalid (timezone)", id="unknown zone"),
        pytest.param(("--cron", "* * * * *", "--timezone", "UTC+3"), "invalid (timezone)", id="POSIX zone"),
        pytest.param(("--show", "--count", "101"), "task_schedule_show_v1: invalid (limit)", id="count 101"),
    ],
)
def test_a_refused_schedule_is_one_line_and_changes_nothing(
    database: Database, options: tuple[str, ...], message: str
) -> None:
    dsn = database.dsn()
    project = a_project(dsn, "cli-sched-bad")
    created = cli(
        "task", "create", "--dsn", dsn, "--project", project, "--name", "job", "--schedule", "@hourly", "--", "x"
    )
    done(created, rf"{UUID}\n")
    before = ql_text(dsn)
    refused(cli("task", "schedule", "--dsn", dsn, "--project", project, "--name", "job", *options), 2, message)
    assert ql_text(dsn) == before


@db
def test_unknown_tasks_and_refused_schedules_at_creation_change_nothing(database: Database) -> None:
    dsn = database.dsn()
    project = a_project(dsn, "cli-sched-none")
    before = ql_text(dsn)
    out = cli("task", "schedule", "--dsn", dsn, "--project", project, "--name", "ghost", "--cron", "* * * * *")
    assert refused(out, 2) == "qinglong: no task 'ghost' (tasks in project cli-sched-none: none)"
    out = cli("task", "schedule", "--dsn", dsn, "--project", SOME_ID, "--name", "ghost", "--show")
    assert refused(out, 2) == f"qinglong: no project '{SOME_ID}' (projects: cli-sched-none)"
    out = cli(
        "task", "create", "--dsn", dsn, "--project", project, "--name", "job", "--schedule", "0 0 31 4 *", "--", "true"
    )
    assert refused(out, 2) == (
        "qinglong: task_schedule_set_v1: invalid (cron_never_fires): no month of the month field has a day of "
        "the day-of-month field"
    )
    assert ql_text(dsn) == before, "the task whose schedule was refused was not created either"


def _schedule(*options: str) -> tuple[str, ...]:
    return ("task", "schedule", "--dsn", UNREACHABLE_DSN, "--project", SOME_ID, "--name", "n", *options)


def _create(*options: str) -> tuple[str, ...]:
    return ("task", "create", "--dsn", UNREACHABLE_DSN, "--project", SOME_ID, "--name", "n", *options, "--", "true")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        pytest.param(_schedule(), "one of the arguments --cron --clear --show is required", id="no action"),
        pytest.param(_schedule("--cron", "* * * * *", "--clear"), "not allowed with argument", id="cron and clear"),
        pytest.param(_schedule("--show", "--overlap", "sometimes"), "--overlap", id="unknown overlap"),
        pytest.param(_schedule("--show", "--count", "0"), "--count", id="count 0"),
        pytest.param(_schedule("--show", "--project", "p 1"), "not a name or id: 'p 1'", id="project not a name"),
        pytest.param(_create("--overlap", "sometimes"), "--overlap", id="task create with an unknown overlap"),
    ],
)
def test_bad_schedule_usage_is_one_line_and_exit_2(args: tuple[str, ...], fragment: str) -> None:
    line = refused(cli(*args), 2, fragment)
    assert line.endswith("(see --help)"), line


def test_timezone_or_overlap_without_a_schedule_is_refused_before_connecting() -> None:
    out = cli(*_create("--timezone", "UTC"))
    assert refused(out, 2) == "qinglong: --timezone and --overlap go with --schedule"


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(_schedule("--show"), id="show"),
        pytest.param(_schedule("--cron", "* * * * *"), id="set"),
        pytest.param(_create("--schedule", "@daily"), id="task create --schedule"),
    ],
)
def test_an_unreachable_database_is_one_line_and_exit_3(args: tuple[str, ...]) -> None:
    refused(cli(*args), 3, "database unreachable")
