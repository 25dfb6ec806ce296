"""The CLI explains itself, run as a child process against the in-process shell's user API (TLS) and the session
cluster: short ids (8 or more hex digits of an id) wherever ids are taken, resolved within what the token may read,
an ambiguous one refused with its candidates; `run show|cancel|logs RUN` find the Run's Project; a refusal names what
was refused and what to do; `run logs --follow` exits with how the Run ended and quietly with 130 on Ctrl-C; an http
or unreachable API address is named; `task show` spells out plan defaults. Every refusal is one line and changes
nothing. Touches: the session cluster's per-test database, the in-process shell on loopback, child processes, token
files.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from qinglong.cli.common import EXIT_INTERRUPTED, EXIT_OUTCOMES
from tests.conftest import Database
from tests.integration.cli.test_cli import _api_args, _env, _token_file, acli, cli, done, ql_text, refused, rows
from tests.integration.db.factories import make_project, make_revision
from tests.integration.shell import conftest as shell_conftest
from tests.integration.shell.conftest import PLAN, Pki, Seed, Shell

pki = shell_conftest.pki
seed = shell_conftest.seed
shell = shell_conftest.shell

pytestmark = pytest.mark.db


def _api(shell: Shell, pki: Pki, token_file: Path) -> tuple[str, ...]:
    """--api, --ca and --token-file, no --project."""
    return _api_args(shell, pki, token_file, "unused")[:-2]


def _run_with_id(dsn: str, project: str, run_id: str) -> str:
    """A queued Run with a chosen id (a new task of the Project)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        revision = make_revision(conn, uuid.UUID(project), PLAN)
        conn.execute(
            "insert into ql.runs (id, project_id, task_id, task_revision_id, pool, status, queued_at_ms, created_at_ms)"
            " select %s, t.project_id, t.task_id, t.id, 'default', 'queued', ql.now_ms(), ql.now_ms()"
            " from ql.task_execution_revisions t where t.id = %s",
            (run_id, revision),
        )
    return run_id


async def test_a_short_run_id_finds_the_run_and_its_project(
    shell: Shell, seed: Seed, pki: Pki, database: Database, tmp_path: Path
) -> None:
    api = _api(shell, pki, _token_file(tmp_path, "operator", seed.operator.token))
    run = seed.runs_p[0]
    out = await acli("run", "show", *api, run[:8])  # no --project
    assert done(out, r"(?s).*\n")[0].splitlines()[0] == f"run {run}: queued (version 2, 1 event)", out
    shown = await acli("run", "show", *api, "--run", run.upper()[:13], "--project", "project-p", "--json")
    assert done(shown, r"(?s)\{.*\}\n") and f'"runId": "{run}"' in shown.stdout, "a prefix with its hyphen, in capitals"
    done(await acli("run", "cancel", *api, run[:10]), rf"run {run}: accepted \(status queued\)\n")

    # Two Runs share a prefix: refused, naming both; more digits choose one.
    dsn = database.dsn()
    a = _run_with_id(dsn, seed.project_p, "5e1ec7ed-1111-4000-8000-000000000001")
    b = _run_with_id(dsn, seed.project_p, "5e1ec7ed-2222-4000-8000-000000000002")
    before = ql_text(dsn)
    line = refused(await acli("run", "cancel", *api, "5e1ec7ed"), 2)
    assert line.startswith("qinglong: 2 Runs' ids start with '5e1ec7ed': ") and line.endswith(": give more of the id")
    assert f"{a} (project-p, t-" in line and f"{b} (project-p, t-" in line, line
    assert ql_text(dsn).count("\n") - before.count("\n") <= 1, "at most the admission's audit row"
    done(await acli("run", "show", *api, "5e1ec7ed-2"), rf"run {b}: queued (?s:.*)")

    # A Run of a Project the token may not read is not found, and the refusal names the Projects it may read.
    other = seed.runs_q[0]
    assert refused(await acli("run", "show", *api, other[:8]), 2) == (
        f"qinglong: no Run '{other[:8]}' in the projects you can see (project-p)"
    )
    assert refused(await acli("run", "logs", *api, other, "--project", "project-p"), 2) == (
        f"qinglong: no Run {other} in project project-p (`qinglong run list --project project-p` lists its Runs)"
    )
    for bad in ("5e1ec7e", "not-hex!", "5e1ec7ed-zz"):
        line = refused(await acli("run", "show", *api, bad), 2, "not a Run id, nor 8 or more of its first hex digits")
        assert line.endswith("(see --help)")
    refused(await acli("run", "show", *api), 2, "name the Run once: RUN or --run RUN")
    refused(await acli("run", "show", *api, a, "--run", a), 2, "name the Run once")


async def test_short_project_and_task_ids_and_refusals_that_name_the_candidates(
    shell: Shell, seed: Seed, pki: Pki, database: Database, tmp_path: Path
) -> None:
    api = _api(shell, pki, _token_file(tmp_path, "operator", seed.operator.token))
    out = await acli("run", "enqueue", *api, "--project", seed.project_p[:8], "--task", seed.task_p[:8])
    run = done(out, r"(\S+)\n")[1]
    assert rows(database.dsn(), "select project_id::text, task_id::text from ql.runs where id = %s", (run,)) == [
        (seed.project_p, seed.task_p)
    ]
    listed = await acli("run", "list", *api, "--project", seed.project_p[:8], "--task", seed.task_p[:9], "--ids")
    assert run in done(listed, r"(?s).*\n")[0].split()

    before = ql_text(database.dsn())
    assert refused(await acli("run", "list", *api, "--project", "nightly"), 2) == (
        "qinglong: no project 'nightly' (projects you can see: project-p)"
    )
    assert refused(await acli("run", "list", *api, "--project", seed.project_q[:8]), 2) == (
        f"qinglong: no project '{seed.project_q[:8]}' (projects you can see: project-p)"
    ), "a short id of a Project the token may not read"
    line = refused(await acli("run", "enqueue", *api, "--project", "project-p", "--task", "nightly"), 2)
    assert line.startswith("qinglong: no task 'nightly' (tasks in project project-p: t-"), line
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        conn.execute("update ql.tasks set status = 'disabled' where id = %s", (seed.task_p,))
    assert refused(await acli("run", "enqueue", *api, "--project", "project-p", "--task", seed.task_p), 2) == (
        f"qinglong: run enqueue of task {seed.task_p} in project project-p: refused (409 fenced.task_disabled): the"
        " task is disabled: an operator enables it with `qinglong task enable`"
    )
    after = ql_text(database.dsn())
    assert {line.split()[0] for line in set(before.splitlines()) ^ set(after.splitlines())} <= {
        "security_audit", "tasks"
    }, "no Run was queued"  # fmt: skip


@pytest.mark.parametrize(("status", "code"), [*EXIT_OUTCOMES.items()])
async def test_logs_follow_exits_with_how_the_run_ended(
    status: str, code: int, shell: Shell, seed: Seed, pki: Pki, database: Database, tmp_path: Path
) -> None:
    run = seed.runs_p[0]
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        conn.execute("update ql.runs set status = %s, ended_at_ms = created_at_ms + 1 where id = %s", (status, run))
    api = _api(shell, pki, _token_file(tmp_path, "viewer", seed.viewer.token))
    out = await acli("run", "logs", *api, run[:8], "--follow")
    assert (out.code, out.stdout, out.stderr) == (code, "", ""), out
    out = await acli("run", "logs", *api, run[:8])
    assert (out.code, out.stderr) == (0, ""), "without --follow: 0, whatever the outcome"


async def test_ctrl_c_while_following_ends_quietly_with_130(shell: Shell, seed: Seed, pki: Pki, tmp_path: Path) -> None:
    api = _api(shell, pki, _token_file(tmp_path, "viewer", seed.viewer.token))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "qinglong.cli", "run", "logs", *api, seed.runs_p[0], "--follow",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_env(),
        # a person's terminal: SIGINT as the default, even when this test runs as a background job (which
        # inherits it ignored, and a program started so keeps ignoring Ctrl-C, as Unix means it to)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    await asyncio.sleep(3)  # the queued Run never ends: it polls
    assert proc.returncode is None, "it still follows"
    proc.send_signal(signal.SIGINT)
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert (await proc.wait(), out, err) == (EXIT_INTERRUPTED, b"", b"")


def test_an_http_or_a_schemeless_address_is_refused_naming_https(pki: Pki, tmp_path: Path) -> None:
    token = _token_file(tmp_path, "t", "a-token-of-the-right-shape")
    for given, use in (
        ("http://127.0.0.1:9443", "https://127.0.0.1:9443"),
        ("shell.example:9443", "https://shell.example:9443"),
    ):
        out = cli("run", "show", "--api", given, "--ca", str(pki.ca), "--token-file", str(token), "0123abcd")
        assert refused(out, 2) == (
            f"qinglong: the user API address {given!r} is not https: it speaks HTTPS only (use {use})"
        )


def test_task_show_spells_out_the_plan_defaults(database: Database) -> None:
    dsn = database.dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        project = make_project(conn, "explained")
    created = cli("task", "create", "--dsn", dsn, "--project", str(project)[:8], "--name", "plain", "--", "true")
    task = done(created, r"(\S+)\n")[1]
    shown = done(cli("task", "show", "--dsn", dsn, "--project", "explained", task[:8]), r"(?s).*\n")[0]
    assert "\ntimeoutMs   none (no timeout)\n" in shown and "\nmaxAttempts 1 (the default: no retry)\n" in shown, shown
    assert "\npool        default\n" in shown, shown


def _option_helps(parser: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, str, str]]:
    import argparse

    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _option_helps(sub, (*prefix, name))
        elif action.option_strings and not action.required and action.nargs != 0 and action.dest != "run_option":
            found.append((" ".join(prefix), action.option_strings[-1], action.help or ""))
    return found


def test_every_optional_option_says_its_default() -> None:
    from qinglong.cli.__main__ import parser

    helps = _option_helps(parser())
    assert len(helps) > 40, helps
    exclusive = {("task schedule", "--cron"), ("task reschedule", "--cron")}  # one of them is required: no default
    assert [h for h in helps if "default" not in h[2] and h[:2] not in exclusive] == []


async def test_a_plain_http_port_is_named_with_its_url_and_exit_3(
    shell: Shell, seed: Seed, pki: Pki, tmp_path: Path
) -> None:
    not_tls = shell.admin_url.replace("http://", "https://")  # the admin listener speaks plain HTTP
    token = _token_file(tmp_path, "viewer", seed.viewer.token)
    out = await acli("run", "show", "--api", not_tls, "--ca", str(pki.ca), "--token-file", str(token), seed.runs_p[0])
    line = refused(out, 3, f"qinglong: shell unreachable at {not_tls}: ")
    assert line.endswith("(is it the user API's HTTPS address?)"), line
