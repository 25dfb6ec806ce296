"""The operator CLI fits the hand: --version; help on every flag of the parser; `pki init` and `subject
create` replace nothing unless --force; --role without --project is a usage error; the user API's
address, CA and token from QINGLONG_* variables or a strict client profile (flags win); --json on the
run commands; a reader that goes away (`| head -1`) ends it quietly; a shell certificate that does not
verify against --ca is bad input (exit 2, "TLS: certificate verify failed"), not an outage. Child
processes, as an operator runs them (the helpers are test_cli's).

Touches: the session cluster (a fresh database per test), temporary folders, the in-process shell on
loopback, child processes.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import pytest

from qinglong.cli.__main__ import parser
from tests.conftest import Database
from tests.integration.cli.test_cli import (
    SOME_ID,
    UNREACHABLE_API,
    UNREACHABLE_DSN,
    UUID,
    Out,
    _env,
    a_project,
    cli,
    done,
    mode,
    ql_text,
    refused,
    rows,
)
from tests.integration.shell import conftest as shell_conftest
from tests.integration.shell.conftest import Pki, Seed, Shell

pki = shell_conftest.pki
seed = shell_conftest.seed
shell = shell_conftest.shell

db = pytest.mark.db

BROKEN_PIPE: Final = 141  # 128 + SIGPIPE, what a shell reports for `yes | head -1`


async def acli(*args: str, env: Mapping[str, str] | None = None) -> Out:
    """The CLI as a child process with extra environment, awaited (the in-process shell keeps serving)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "qinglong.cli", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_env(env),
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return Out(proc.returncode, out.decode(), err.decode())


def _token_file(tmp_path: Path, name: str, token: str) -> Path:
    path = tmp_path / f"{name}.token"
    path.write_text(token + "\n")
    path.chmod(0o600)
    return path


# -- the parser ------------------------------------------------------------------------------------


def _parsers(p: argparse.ArgumentParser, path: str = "qinglong") -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(path, p)]
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _parsers(sub, f"{path} {name}")
    return found


def test_every_flag_and_argument_of_the_parser_has_help() -> None:
    parsers = _parsers(parser())
    assert len(parsers) > 20, "the walk reaches every command"
    missing = [
        f"{path} {'/'.join(a.option_strings) or a.dest}"
        for path, p in parsers
        for a in p._actions
        if not isinstance(a, argparse._SubParsersAction) and not (a.help and a.help.strip())
    ]
    assert missing == [], missing


def test_version_is_the_installed_distribution() -> None:
    done(cli("--version"), rf"qinglong {importlib.metadata.version('qinglong-control')}\n")


# -- no silent overwrite ---------------------------------------------------------------------------


def test_pki_init_refuses_an_existing_ca_unless_force(tmp_path: Path) -> None:
    folder = tmp_path / "pki"
    done(cli("pki", "init", "--dir", str(folder), "--host", "127.0.0.1"), r"CA and server certificate .*\n")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}

    out = cli("pki", "init", "--dir", str(folder), "--host", "shell.example")
    assert refused(out, 2) == f"qinglong: {folder} already holds a CA (ca.crt, ca.key): pass --force to replace it"
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before, "nothing was replaced"

    done(cli("pki", "init", "--dir", str(folder), "--host", "shell.example", "--force"), r"CA and server .*\n")
    after = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert after.keys() == before.keys() and after["ca.crt"] != before["ca.crt"]


def test_role_without_project_is_a_usage_error_before_anything_is_touched(tmp_path: Path) -> None:
    token_file = tmp_path / "a.token"
    out = cli(
        "subject", "create", "--dsn", UNREACHABLE_DSN, "--name", "a", "--token-file", str(token_file),
        "--role", "viewer",
    )  # fmt: skip
    assert refused(out, 2) == "qinglong: --role goes with --project (the project to bind the subject to)"
    assert list(tmp_path.iterdir()) == []


@db
def test_subject_create_writes_a_new_0600_token_file_and_prints_the_id_alone(
    database: Database, tmp_path: Path
) -> None:
    dsn = database.dsn()
    project = a_project(dsn, "hand")
    token_file = tmp_path / "deep" / "er.token"
    out = cli(
        "subject", "create", "--dsn", dsn, "--name", "erin", "--token-file", str(token_file), "--project", project,
        "--json",
    )  # fmt: skip
    answer = json.loads(done(out, r"(?s)\{.*\}\n")[0])
    assert rows(dsn, "select name from ql.subjects where id = %s", (answer["subjectId"],)) == [("erin",)]
    assert rows(dsn, "select role from ql.role_bindings where subject_id = %s", (answer["subjectId"],)) == [
        ("operator",)
    ]
    assert mode(token_file) == 0o600 and [p.name for p in token_file.parent.iterdir()] == ["er.token"]


@db
def test_a_refused_subject_create_leaves_no_token_file(database: Database, tmp_path: Path) -> None:
    dsn = database.dsn()
    token_file = tmp_path / "x.token"
    before = ql_text(dsn)
    out = cli("subject", "create", "--dsn", dsn, "--kind", "user", "--name", "", "--token-file", str(token_file))
    refused(out, 2, "subject_create_v1: invalid")
    assert list(tmp_path.iterdir()) == [] and ql_text(dsn) == before


# -- ids alone, for $(…) -----------------------------------------------------------------------------


@db
def test_creating_commands_compose_in_a_shell(database: Database, tmp_path: Path) -> None:
    script = """set -eu
        P=$(qinglong project create --dsn "$DSN" composed)
        T=$(qinglong task create --dsn "$DSN" --project "$P" --name build -- true)
        S=$(qinglong subject create --dsn "$DSN" --name sam --token-file "$DIR/sam.token" --project "$P")
        echo "$P $T $S"
    """
    env = {
        **_env(),
        "DSN": database.dsn(),
        "DIR": str(tmp_path),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0 and out.stderr == "", out
    project, task, subject = out.stdout.split()
    dsn = database.dsn()
    assert rows(dsn, "select id::text from ql.projects where name = 'composed'") == [(project,)]
    assert rows(dsn, "select project_id::text from ql.tasks where id = %s", (task,)) == [(project,)]
    assert rows(dsn, "select project_id::text from ql.role_bindings where subject_id = %s", (subject,)) == [(project,)]


# -- a reader that goes away -----------------------------------------------------------------------


def _into_a_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI writing into a pipe nobody reads any more (what `| head -1` leaves once head is done)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-m", "qinglong.cli", *args], stdout=write, stderr=subprocess.PIPE, text=True,
            timeout=120, env=_env(),
        )  # fmt: skip
    finally:
        os.close(write)


@db
def test_many_lines_into_head_end_quietly(database: Database) -> None:
    dsn = database.dsn()
    project = a_project(dsn, "piped")
    base = ("--dsn", dsn, "--project", project, "--name", "tick")
    done(cli("task", "create", *base, "--schedule", "* * * * *", "--", "true"), rf"{UUID}\n")
    show = ("task", "schedule", *base, "--show", "--count", "100")
    assert len(done(cli(*show), r"(?s).*")[0].splitlines()) == 101

    closed = _into_a_closed_pipe(*show)
    assert (closed.returncode, closed.stderr) == (BROKEN_PIPE, "")

    piped = subprocess.run(
        ["bash", "-c", 'set -o pipefail; "$@" | head -1', "bash", sys.executable, "-m", "qinglong.cli", *show],
        capture_output=True, text=True, timeout=120, env=_env(),
    )  # fmt: skip
    assert piped.returncode in (0, BROKEN_PIPE) and piped.stderr == "", piped
    assert piped.stdout.startswith("task tick: '* * * * *' UTC") and piped.stdout.count("\n") == 1, piped


# -- the client profile ------------------------------------------------------------------------------


def test_a_client_profile_with_an_unknown_key_is_one_line(tmp_path: Path) -> None:
    profile = tmp_path / "client.toml"
    profile.write_text(f'api = "{UNREACHABLE_API}"\ntoken = "no-tokens-in-profiles"\n')
    out = cli("run", "show", "--project", SOME_ID, "--run", SOME_ID, env={"QINGLONG_CONFIG": str(profile)})
    line = refused(out, 2, "client profile", "token")
    assert "no-tokens-in-profiles" not in line


def test_a_missing_named_client_profile_is_one_line(tmp_path: Path) -> None:
    out = cli("run", "show", "--project", SOME_ID, "--run", SOME_ID, env={"QINGLONG_CONFIG": str(tmp_path / "no")})
    refused(out, 2, "cannot read the client profile")


def test_the_default_profile_path_is_read(tmp_path: Path) -> None:
    (tmp_path / ".config" / "qinglong").mkdir(parents=True)
    (tmp_path / ".config" / "qinglong" / "client.toml").write_text("[user]\n")
    out = cli("run", "show", "--project", SOME_ID, "--run", SOME_ID, env={"HOME": str(tmp_path)})
    refused(out, 2, "client profile", "user")


@db
async def test_the_user_api_from_variables_or_a_profile_and_flags_win(
    shell: Shell, seed: Seed, pki: Pki, tmp_path: Path
) -> None:
    token_file = _token_file(tmp_path, "operator", seed.operator.token)
    variables = {"QINGLONG_API": shell.user_url, "QINGLONG_CA": str(pki.ca), "QINGLONG_TOKEN_FILE": str(token_file)}
    out = await acli("run", "enqueue", "--project", seed.project_p, "--task", seed.task_p, "--json", env=variables)
    enqueued = json.loads(done(out, r"(?s)\{.*\}\n")[0])
    assert enqueued["status"] == "enqueued", enqueued

    # A profile: paths relative to the file; the flag --api wins over the profile's unreachable one.
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "ca.crt").write_bytes(pki.ca.read_bytes())
    profile = tmp_path / "conf" / "client.toml"
    profile.write_text(f'api = "{UNREACHABLE_API}"\nca = "ca.crt"\ntoken_file = "../operator.token"\n')
    run = ("--project", seed.project_p, "--run", enqueued["runId"])
    env = {"QINGLONG_CONFIG": str(profile)}
    refused(await acli("run", "show", *run, env=env), 3, "shell unreachable")
    out = await acli("run", "show", *run, "--json", "--api", shell.user_url, env=env)
    assert json.loads(done(out, r"(?s)\{.*\}\n")[0])["run"]["runId"] == enqueued["runId"]
    out = await acli("run", "cancel", *run, "--json", env={**env, "QINGLONG_API": shell.user_url})
    assert json.loads(done(out, r"(?s)\{.*\}\n")[0])["status"] == "accepted"


# -- TLS verification ------------------------------------------------------------------------------


@db
async def test_a_shell_certificate_the_ca_does_not_verify_is_bad_input(
    shell: Shell, seed: Seed, pki: Pki, database: Database, tmp_path: Path
) -> None:
    token_file = _token_file(tmp_path, "operator", seed.operator.token)
    before = ql_text(database.dsn())
    out = await acli(
        "run", "enqueue", "--api", shell.user_url, "--ca", str(pki.rogue_ca), "--token-file", str(token_file),
        "--project", seed.project_p, "--task", seed.task_p,
    )  # fmt: skip
    line = refused(out, 2, "qinglong: TLS: certificate verify failed", str(pki.rogue_ca))
    assert "unreachable" not in line
    assert ql_text(database.dsn()) == before, "no Run was enqueued"
