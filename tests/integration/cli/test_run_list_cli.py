"""`qinglong run list` as an operator runs it, a child process against the in-process shell's user API: a table
newest first with the next page's cursor, pages walked with --cursor, filters by --task, --status, --since and
--until (ISO 8601, UTC without an offset), one JSON document with --json; bad input is one line and exit 2,
before any request or refused by the API, and changes nothing; an unreachable shell is exit 3.
Touches: the session cluster's per-test database, the in-process shell on loopback, child processes, token files.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path
from typing import Final

import psycopg
import pytest

from tests.conftest import Database
from tests.integration.cli.test_cli import _api_args, _token_file, acli, ql_text, refused, rows
from tests.integration.db.factories import make_revision, make_runs
from tests.integration.shell import conftest as shell_conftest
from tests.integration.shell.conftest import PLAN, Pki, Seed, Shell

# The in-process shell's fixtures, under the module-level names pytest looks fixtures up by.
pki = shell_conftest.pki
seed = shell_conftest.seed
shell = shell_conftest.shell

pytestmark = pytest.mark.db

HEADER: Final = ["RUN", "STATUS", "TASK", "ATTEMPTS", "CREATED", "(UTC)", "STARTED", "(UTC)", "ENDED", "(UTC)", "EXIT"]


def _ordered(dsn: str, project: str, where: str = "true") -> list[str]:
    query = f"select id::text from ql.runs where project_id = %s and {where} order by created_at_ms desc, id desc"  # noqa: S608 - the test's own filters
    return [str(r[0]) for r in rows(dsn, query, (project,))]


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).replace(tzinfo=None).isoformat(timespec="milliseconds")


async def test_run_list_prints_a_table_walks_pages_and_filters(
    shell: Shell, seed: Seed, pki: Pki, database: Database, tmp_path: Path
) -> None:
    dsn = database.dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        make_runs(conn, make_revision(conn, uuid.UUID(seed.project_p), PLAN), 4)
        conn.execute(
            "update ql.runs set status = 'failed', ended_at_ms = created_at_ms + 1 where id = %s", (seed.runs_p[1],)
        )
    api = _api_args(shell, pki, _token_file(tmp_path, "viewer", seed.viewer.token), seed.project_p)
    expected = _ordered(dsn, seed.project_p)
    assert len(expected) == 7

    listed: list[str] = []
    cursor: list[str] = []
    for _ in range(4):
        out = await acli("run", "list", *api, "--limit", "3", *cursor)
        assert out.code == 0 and out.stderr == "", out
        lines = out.stdout.splitlines()
        assert lines[0].split()[: len(HEADER)] == HEADER, lines
        listed += [line.split()[0] for line in lines[1:-1]]
        if not lines[-1].startswith("next page: --cursor "):
            assert lines[-1] == f"{len(lines) - 2} Run{'s' if len(lines) > 3 else ''}, the last page", lines
            break
        cursor = ["--cursor", lines[-1].removeprefix("next page: --cursor ")]
    assert listed == expected, "pages of 3 walked by the printed cursor are the whole history, newest first"

    out = await acli("run", "list", *api, "--status", "failed")
    assert out.code == 0, out
    (row,) = out.stdout.splitlines()[1:-1]
    cells = row.split()
    assert cells[0] == seed.runs_p[1] and cells[1] == "failed" and cells[3] == "0", row
    assert cells[-2:] == ["-", "-"], "no exit code (never started), no cancel reason"

    out = await acli("run", "list", *api, "--task", seed.task_p, "--json")
    assert out.code == 0 and out.stderr == "", out
    page = json.loads(out.stdout)
    assert page["schema"] == "qinglong/run-list@v1" and page["nextCursor"] is None
    assert [r["runId"] for r in page["runs"]] == _ordered(dsn, seed.project_p, f"task_id = '{seed.task_p}'")

    (middle,) = rows(dsn, "select created_at_ms from ql.runs where id = %s", (expected[3],))[0]
    out = await acli("run", "list", *api, "--since", _iso(middle), "--json")
    since = [r["runId"] for r in json.loads(out.stdout)["runs"]]
    assert since == _ordered(dsn, seed.project_p, f"created_at_ms >= {middle}") and expected[3] in since
    out = await acli("run", "list", *api, "--until", _iso(middle) + "+00:00", "--json")
    until = [r["runId"] for r in json.loads(out.stdout)["runs"]]
    assert until == _ordered(dsn, seed.project_p, f"created_at_ms < {middle}") and expected[3] not in until
    assert set(since) | set(until) == set(expected) and not set(since) & set(until)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--status", "finished"), "argument --status: invalid choice"),
        (("--since", "yesterday"), "not an ISO 8601 date or date-time: yesterday"),
        (("--limit", "0"), "not a positive integer: 0"),
        (("--limit", "101"), "bad filter: RunListQuery.limit: outside 1..100"),
        (("--cursor", "abc"), "bad filter: RunListQuery.cursor: shorter than 32 characters"),
        (("--since", "1969-12-31"), "bad filter: RunListQuery.sinceMs: outside 0.."),
        (("--task", "4/2"), "not a name or id: '4/2'"),
        (("--task", "ghost"), "no task 'ghost' (tasks in project project-p: "),
        (("--cursor", "_" * 32), ": refused (400 invalid.cursor): the cursor is not one the run history answered"),
        (("--since", "2026-01-02", "--until", "2026-01-01"), "refused (400 invalid.time_range): "),
    ],
)
async def test_bad_input_is_one_line_exit_2_and_changes_nothing(
    args: tuple[str, ...], fragment: str, shell: Shell, seed: Seed, pki: Pki, database: Database, tmp_path: Path
) -> None:
    api = _api_args(shell, pki, _token_file(tmp_path, "operator", seed.operator.token), seed.project_p)
    before = ql_text(database.dsn())
    refused(await acli("run", "list", *api, *args), 2, fragment)
    after = ql_text(database.dsn())
    changed = set(before.splitlines()) ^ set(after.splitlines())
    assert {line.split()[0] for line in changed} <= {"security_audit"}, "at most the admission's audit row"
    asked = "refused (" in fragment or fragment.startswith("no task")  # the API refused it, or the task list answered
    assert len(changed) == (1 if asked else 0), "a refusal before any request sends none"


async def test_another_project_is_404_and_an_unreachable_shell_is_exit_3(
    shell: Shell, seed: Seed, pki: Pki, tmp_path: Path
) -> None:
    token = _token_file(tmp_path, "operator", seed.operator.token)
    other = _api_args(shell, pki, token, seed.project_q)
    assert refused(await acli("run", "list", *other), 2) == (
        f"qinglong: no project '{seed.project_q}' (projects you can see: project-p)"
    ), "a Project without a role there is not found, and the refusal names the ones the token may read"
    gone = (
        "--api",
        "https://127.0.0.1:1",
        "--ca",
        str(pki.ca),
        "--token-file",
        str(token),
        "--project",
        seed.project_p,
    )
    refused(await acli("run", "list", *gone), 3, "shell unreachable")
