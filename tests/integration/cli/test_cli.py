"""The operator CLI (`python -m qinglong.cli`) run as an operator runs it, as a child process: every
command's --help; project, subject, task and worker commands against a fresh database (what each one
stores, and that a bearer token never reaches the database); converge --once; db verify and a
revert/deploy round trip on a scratch database; run enqueue/cancel/show through the user API of the
in-process shell. Every refusal is exactly one line on stderr, no traceback: exit 2 for bad usage or
input, exit 3 for an unreachable database or shell.

Touches: the session cluster (a fresh database per test, one scratch database), temporary folders
(token files, PKI), the in-process shell on loopback, child processes.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import psycopg
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from psycopg import sql

from qinglong.cli import pki as pki_cli
from qinglong.cli.__main__ import parser
from qinglong.cli.common import is_uuid
from qinglong.devdb import Cluster
from qinglong.wire.specs import UUID_PATTERN
from tests.conftest import Database
from tests.integration.db.factories import make_project, make_revision, make_runs
from tests.integration.shell import conftest as shell_conftest
from tests.integration.shell.conftest import Pki, Seed, Shell

# The in-process shell's fixtures (a real PKI, the seeded database, the three listeners), under the
# module-level names pytest looks fixtures up by.
pki = shell_conftest.pki
seed = shell_conftest.seed
shell = shell_conftest.shell

db = pytest.mark.db

UUID: Final = UUID_PATTERN
SOME_ID: Final = "6f1c1f1e-2a4b-4c8d-9e0f-1a2b3c4d5e6f"
UNREACHABLE_DSN: Final = "host=127.0.0.1 port=1 user=postgres dbname=postgres"
UNREACHABLE_API: Final = "https://127.0.0.1:1"

# Every command of the parser, groups included (checked against the parser itself below).
COMMANDS: Final[tuple[tuple[str, ...], ...]] = (
    (),
    ("db",),
    ("db", "deploy"),
    ("db", "verify"),
    ("db", "revert"),
    ("db", "status"),
    ("pki",),
    ("pki", "init"),
    ("pki", "plan-key"),
    ("pki", "plan-key", "new"),
    ("pki", "plan-key", "show"),
    ("worker",),
    ("worker", "enroll"),
    ("worker", "renew"),
    ("worker", "run"),
    ("worker", "list"),
    ("worker", "disable"),
    ("worker", "enable"),
    ("pool",),
    ("pool", "list"),
    ("pool", "lease"),
    ("project",),
    ("project", "create"),
    ("project", "list"),
    ("subject",),
    ("subject", "create"),
    ("subject", "list"),
    ("subject", "disable"),
    ("subject", "enable"),
    ("task",),
    ("task", "create"),
    ("task", "schedule"),
    ("task", "list"),
    ("task", "show"),
    ("task", "disable"),
    ("task", "enable"),
    ("task", "revise"),
    ("task", "deactivate"),
    ("task", "activate"),
    ("task", "reschedule"),
    ("task", "preview"),
    ("role",),
    ("role", "set"),
    ("role", "revoke"),
    ("run",),
    ("run", "enqueue"),
    ("run", "cancel"),
    ("run", "show"),
    ("run", "list"),
    ("run", "logs"),
    ("converge",),
    ("secret",),
    ("secret", "set"),
    ("secret", "list"),
    ("secret", "delete"),
    ("secret", "keygen"),
    ("shell",),
    ("shell", "serve"),
    ("notify",),
    ("notify", "rule"),
    ("notify", "rule", "add"),
    ("notify", "rule", "list"),
    ("notify", "rule", "remove"),
    ("notify", "deliveries"),
    ("notify", "serve"),
)


# -- running the CLI -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Out:
    code: int
    stdout: str
    stderr: str


def _env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without any QINGLONG_* variable, so only the arguments count."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QINGLONG_")}
    env.update(extra or {})
    return env


def cli(*args: str, env: Mapping[str, str] | None = None) -> Out:
    done = subprocess.run(
        [sys.executable, "-m", "qinglong.cli", *args], capture_output=True, text=True, timeout=120, env=_env(env)
    )
    return Out(done.returncode, done.stdout, done.stderr)


async def acli(*args: str) -> Out:
    """The CLI as a child process, awaited, so the in-process shell keeps serving meanwhile."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "qinglong.cli",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=_env(),
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return Out(proc.returncode, out.decode(), err.decode())


def done(out: Out, pattern: str) -> re.Match[str]:
    """A success: exit 0, nothing on stderr, stdout matching `pattern` exactly."""
    assert out.code == 0 and out.stderr == "", out
    match = re.fullmatch(pattern, out.stdout)
    assert match is not None, (pattern, out.stdout)
    return match


def refused(out: Out, code: int, *fragments: str) -> str:
    """A refusal: exit `code`, nothing on stdout, exactly one line on stderr (no traceback) holding every fragment."""
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and out.stderr.endswith("\n"), out.stderr
    assert out.code == code, out
    assert out.stdout == "", out
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


# -- the database ----------------------------------------------------------------------------------


def rows(dsn: str, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(query, params).fetchall()


def ql_text(dsn: str) -> str:
    """Every row of every table of schema ql, as text, sorted: everything the control plane stores."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = [
            str(r[0])
            for r in conn.execute(
                "select c.relname from pg_catalog.pg_class c join pg_catalog.pg_namespace n on n.oid = c.relnamespace"
                " where n.nspname = 'ql' and c.relkind in ('r', 'p') and not c.relispartition order by 1"
            ).fetchall()
        ]
        assert "subjects" in tables and "runs" in tables, tables
        lines: list[str] = []
        for table in tables:
            query = sql.SQL("select t::text from {} t order by 1").format(sql.Identifier("ql", table))
            lines += [f"{table} {r[0]}" for r in conn.execute(query).fetchall()]
        return "\n".join(lines)


def a_project(dsn: str, name: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return str(make_project(conn, name))


def api_functions(dsn: str) -> list[str]:
    return [
        str(r[0])
        for r in rows(
            dsn,
            "select p.oid::regprocedure::text from pg_catalog.pg_proc p join pg_catalog.pg_namespace n"
            " on n.oid = p.pronamespace where n.nspname = 'ql_api' order by 1",
        )
    ]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def der_sha256(certificate: Path) -> bytes:
    cert = x509.load_pem_x509_certificate(certificate.read_bytes())
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).digest()


# -- --help ----------------------------------------------------------------------------------------


def _commands(p: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield prefix
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*prefix, name))


def test_the_help_cases_name_every_command_of_the_parser() -> None:
    assert sorted(_commands(parser())) == sorted(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "qinglong")
def test_help_of_every_command_exits_0(command: tuple[str, ...]) -> None:
    out = cli(*command, "--help")
    assert out.code == 0 and out.stderr == "", out
    assert out.stdout.startswith("usage: " + " ".join(("qinglong", *command))), out.stdout


# -- project create --------------------------------------------------------------------------------


@db
def test_project_create_is_created_then_exists_with_the_same_id(database: Database) -> None:
    dsn = database.dsn()
    project = done(cli("project", "create", "--dsn", dsn, "cli-alpha"), rf"({UUID})\n")[1]  # the id alone
    assert rows(dsn, "select id::text, status, version from ql.projects where name = 'cli-alpha'") == [
        (project, "active", 1)
    ]
    before = ql_text(dsn)
    out = cli("project", "create", "--dsn", dsn, "cli-alpha", "--verbose")
    assert (out.code, out.stdout, out.stderr) == (0, f"{project}\n", f"project cli-alpha: exists {project}\n")
    out = cli("project", "create", "cli-alpha", "--json", env={"QINGLONG_DSN": dsn})
    assert json.loads(done(out, r"(?s)\{.*\}\n")[0]) == {"status": "exists", "projectId": project}
    assert ql_text(dsn) == before, "exists writes nothing"


@db
def test_project_create_refuses_an_invalid_name_and_writes_nothing(database: Database) -> None:
    dsn = database.dsn()
    before = ql_text(dsn)
    refused(cli("project", "create", "--dsn", dsn, "two words"), 2, "project_create_v1: invalid (name)")
    refused(cli("project", "create", "--dsn", dsn, "--", "-x"), 2, "project_create_v1: invalid (name)")
    # A name that reads as a uuid could never be addressed by name (an id is tried first): one line saying why.
    line = refused(cli("project", "create", "--dsn", dsn, "0b5e6f2a-9c1d-4e3f-8a7b-6c5d4e3f2a1b"), 2)
    assert line == (
        "qinglong: project_create_v1: invalid (name): a name that reads as a uuid would be taken for an id"
    ), line
    assert ql_text(dsn) == before


def test_a_task_or_project_argument_is_an_id_only_in_the_form_the_database_reads_as_one() -> None:
    """The canonical form, in either case, is an id (as ql.project_named reads it); anything else is a name, such as
    a task name of 32 hex digits with an underscore, which uuid.UUID would read and the database does not refuse."""
    assert is_uuid(SOME_ID) and is_uuid(SOME_ID.upper())
    assert not is_uuid("0123456789abcdef0123456789abcd_f")
    assert not is_uuid(SOME_ID.replace("-", "")) and not is_uuid(f"{{{SOME_ID}}}") and not is_uuid(f"{SOME_ID}\n")


# -- subject create --------------------------------------------------------------------------------


@db
def test_subject_create_writes_a_0600_token_and_only_its_digest_reaches_the_database(
    database: Database, tmp_path: Path
) -> None:
    dsn = database.dsn()
    project = a_project(dsn, "cli-subjects")
    token_file = tmp_path / "secrets" / "alice.token"  # the folder does not exist yet
    out = cli(
        "subject", "create", "--dsn", dsn, "--name", "alice", "--token-file", str(token_file),
        "--project", project, "--role", "viewer",
    )  # fmt: skip
    subject = done(out, rf"({UUID})\n")[1]

    assert mode(token_file) == 0o600, oct(mode(token_file))
    text = token_file.read_text()
    token = text.strip()
    assert text == token + "\n" and len(token) >= 40 and token.isprintable()
    assert token not in out.stdout + out.stderr, "the token is written to its file only"

    digest = hashlib.sha256(token.encode()).digest()
    assert rows(dsn, "select kind, name, token_digest, status from ql.subjects where id = %s", (subject,)) == [
        ("user", "alice", digest, "active")
    ]
    assert rows(dsn, "select role, active from ql.role_bindings where project_id = %s and subject_id = %s",
                (project, subject)) == [("viewer", True)]  # fmt: skip
    stored = ql_text(dsn)
    assert token not in stored, "the raw token is nowhere in the database"
    assert digest.hex() in stored, "its SHA-256 is"

    # The token works: the shell's admission of its digest allows a read of the Project.
    with psycopg.connect(database.runtime_dsn, autocommit=True) as rt:
        row = rt.execute(
            "select ql_api.request_admission_v1(%s, %s, 'run.read', 'GET /x', 'cli.1')", (digest, project)
        ).fetchone()
    assert row is not None and row[0]["decision"] == "allow", row

    # An agent without a Project: no binding, its own token.
    agent_file = tmp_path / "robot.token"
    out = cli(
        "subject", "create", "--dsn", dsn, "--kind", "agent", "--name", "robot", "--token-file", str(agent_file),
        "--verbose",
    )  # fmt: skip
    agent = out.stdout.strip()
    assert out.code == 0 and re.fullmatch(UUID, agent), out
    assert out.stderr == f"subject robot (agent) {agent}: bearer token written to {agent_file}\n"
    assert agent_file.read_text().strip() != token
    assert rows(dsn, "select count(*) from ql.role_bindings where subject_id = %s", (agent,)) == [(0,)]


@db
def test_subject_create_replaces_an_existing_token_file_only_with_force(database: Database, tmp_path: Path) -> None:
    dsn = database.dsn()
    token_file = tmp_path / "bob.token"
    token_file.write_text("an old token\n")
    token_file.chmod(0o644)
    before = ql_text(dsn)
    out = cli("subject", "create", "--dsn", dsn, "--name", "bob", "--token-file", str(token_file))
    assert refused(out, 2) == f"qinglong: {token_file} exists: pass --force to replace it"
    assert token_file.read_text() == "an old token\n" and mode(token_file) == 0o644
    assert ql_text(dsn) == before, "no subject without its token file"

    out = cli("subject", "create", "--dsn", dsn, "--name", "bob", "--token-file", str(token_file), "--force")
    assert out.code == 0, out
    assert [p.name for p in tmp_path.iterdir()] == ["bob.token"], "no temporary file is left behind"
    assert token_file.read_text() != "an old token\n"
    assert mode(token_file) == 0o600, f"the new bearer token sits in a {oct(mode(token_file))} file"


@db
def test_a_refused_subject_create_registers_no_subject(database: Database, tmp_path: Path) -> None:
    dsn = database.dsn()
    token_file = tmp_path / "carol.token"
    before = ql_text(dsn)
    out = cli(
        "subject", "create", "--dsn", dsn, "--name", "carol", "--token-file", str(token_file), "--project", SOME_ID
    )  # fmt: skip
    refused(out, 2, f"no project '{SOME_ID}'")
    assert not token_file.exists()
    assert rows(dsn, "select count(*) from ql.subjects where name = 'carol'") == [(0,)], "a subject was left behind"
    assert ql_text(dsn) == before


# -- task create -----------------------------------------------------------------------------------


@db
def test_task_create_takes_argv_after_dashdash_timeout_and_env_then_revises(database: Database) -> None:
    dsn = database.dsn()
    project = a_project(dsn, "cli-tasks")
    out = cli(
        "task", "create", "--dsn", dsn, "--project", project, "--name", "build", "--timeout-ms", "5000", "--json",
        "--env", "CI=1", "--env", "OPTS=a=b", "--env", "EMPTY=", "--", "sh", "-c", "echo $CI", "--not-an-option",
    )  # fmt: skip
    created = json.loads(done(out, r"(?s)\{.*\}\n")[0])
    task, rev1 = created["taskId"], created["revisionId"]
    assert created == {"status": "created", "taskId": task, "revisionId": rev1}, created
    plan1 = {
        "argv": ["sh", "-c", "echo $CI", "--not-an-option"],
        "timeoutMs": 5000,
        "env": {"CI": "1", "OPTS": "a=b", "EMPTY": ""},
    }
    assert rows(dsn, "select task_id::text, project_id::text, plan_json from ql.task_execution_revisions where id = %s",
                (rev1,)) == [(task, project, plan1)]  # fmt: skip
    assert rows(dsn, "select name, current_revision_id::text from ql.tasks where id = %s", (task,)) == [("build", rev1)]

    out = cli(
        "task", "create", "--dsn", dsn, "--project", project, "--name", "build", "--max-attempts", "3",
        "--retry-backoff-ms", "250", "--pool", "gpu", "--user", "builder", "--group", "staff", "--", "make", "-j4",
    )  # fmt: skip
    done(out, rf"{task}\n")  # the id alone
    [(rev2,)] = rows(dsn, "select current_revision_id::text from ql.tasks where id = %s", (task,))
    assert rev2 != rev1
    assert rows(dsn, "select current_revision_id::text from ql.tasks where id = %s", (task,)) == [(rev2,)]
    revisions = rows(
        dsn,
        "select id::text, plan_json from ql.task_execution_revisions where task_id = %s order by id = %s",
        (task, rev2),
    )
    assert revisions == [
        (rev1, plan1),
        (
            rev2,
            {
                "argv": ["make", "-j4"],
                "maxAttempts": 3,
                "retryBackoffMs": 250,
                "pool": "gpu",
                "user": "builder",
                "group": "staff",
            },
        ),
    ]


@db
@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param(
            ("--timeout-ms", "99999999999"), "the plan: timeoutMs: outside 1..2147483647", id="timeout beyond 2^31-1"
        ),
        pytest.param(("--max-attempts", "101"), "the plan: maxAttempts: outside 1..100", id="101 attempts"),
        pytest.param(
            ("--retry-backoff-ms", "-1"), "the plan: retryBackoffMs: outside 0..2147483647", id="negative backoff"
        ),
        pytest.param(("--pool", "GPU"), "the plan: pool: does not match [a-z0-9_-]{1,64}", id="upper-case pool"),
        pytest.param(("--user", "0"), "the plan: user: does not match", id="a uid, not a user name"),
        pytest.param(("--env", "NOVALUE"), "--env takes NAME=VALUE", id="env without ="),
        pytest.param(("--env", "=x"), "--env takes NAME=VALUE", id="env without a name"),
    ],
)
def test_task_create_refuses_a_bad_plan_and_writes_nothing(
    database: Database, options: tuple[str, ...], message: str
) -> None:
    dsn = database.dsn()
    project = a_project(dsn, "cli-bad-plans")
    before = ql_text(dsn)
    out = cli("task", "create", "--dsn", dsn, "--project", project, "--name", "build", *options, "--", "true")
    refused(out, 2, message)
    assert ql_text(dsn) == before


@db
def test_task_create_in_an_unknown_project_is_not_found_and_writes_nothing(database: Database) -> None:
    dsn = database.dsn()
    before = ql_text(dsn)
    out = cli("task", "create", "--dsn", dsn, "--project", SOME_ID, "--name", "build", "--", "true")
    assert refused(out, 2) == f"qinglong: no project '{SOME_ID}' (projects: none)"
    assert ql_text(dsn) == before


# -- pki init and worker enroll --------------------------------------------------------------------


@db
def test_worker_enroll_writes_a_certificate_whose_der_sha256_is_enrolled(database: Database, tmp_path: Path) -> None:
    dsn = database.dsn()
    folder = tmp_path / "pki"
    init = cli("pki", "init", "--dir", str(folder), "--host", "127.0.0.1", "--host", "shell.example")
    hosts = r"127\.0\.0\.1, shell\.example"
    done(init, rf"CA and server certificate for {hosts} in {re.escape(str(folder))} \(server\.crt\)\n")
    assert {p.name for p in folder.iterdir()} == {"ca.crt", "ca.key", "server.crt", "server.key"}
    assert (mode(folder / "ca.key"), mode(folder / "server.key")) == (0o600, 0o600)

    out = cli("worker", "enroll", "--dsn", dsn, "--pki", str(folder), "--name", "builder-1", "--pool", "gpu", "--json")
    enrolled = json.loads(done(out, r"(?s)\{.*\}\n")[0])
    worker, cert_path, key_path = enrolled["workerId"], Path(enrolled["certificate"]), Path(enrolled["key"])
    assert enrolled == {"status": "enrolled", "workerId": worker, "generation": 1,
                        "certificate": str(cert_path), "key": str(key_path)}  # fmt: skip
    assert (cert_path, key_path) == (folder / f"worker-{worker}.crt", folder / f"worker-{worker}.key")
    assert mode(key_path) == 0o600 and mode(cert_path) == 0o644

    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    ca = x509.load_pem_x509_certificate((folder / "ca.crt").read_bytes())
    cert.verify_directly_issued_by(ca)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.UniformResourceIdentifier) == [f"urn:qinglong:worker:{worker}"]
    first = der_sha256(cert_path)
    assert rows(dsn, "select name, pool, generation, status, cert_fingerprint from ql.workers where id = %s",
                (worker,)) == [("builder-1", "gpu", 1, "active", first)]  # fmt: skip

    # Re-enrolment: a new certificate, its fingerprint enrolled at generation 2.
    out = cli(
        "worker", "enroll", "--dsn", dsn, "--pki", str(folder), "--name", "builder-1", "--id", worker, "--verbose"
    )
    sentence = f"reenrolled worker {worker} generation 2: {cert_path}, {key_path}\n"
    assert (out.code, out.stdout, out.stderr) == (0, f"{worker}\n", sentence), out
    second = der_sha256(cert_path)
    assert second != first
    assert rows(dsn, "select pool, generation, cert_fingerprint from ql.workers where id = %s", (worker,)) == [
        ("default", 2, second)
    ]


@db
def test_a_refused_re_enrolment_keeps_the_enrolled_certificate(database: Database, tmp_path: Path) -> None:
    dsn = database.dsn()
    folder = tmp_path / "pki"
    pki_cli.init_ca(folder)
    out = cli("worker", "enroll", "--dsn", dsn, "--pki", str(folder), "--name", "builder-2")
    worker = done(out, rf"({UUID})\n")[1]
    cert_path = folder / f"worker-{worker}.crt"
    enrolled_cert = cert_path.read_bytes()
    before = ql_text(dsn)

    out = cli(
        "worker", "enroll", "--dsn", dsn, "--pki", str(folder), "--name", "builder-2", "--pool", "GPU", "--id", worker
    )  # fmt: skip
    refused(out, 2, "worker_enroll_v1: invalid (pool)")
    assert ql_text(dsn) == before, "the refused re-enrolment changes nothing in the database"
    enrolled_fingerprint = rows(dsn, "select cert_fingerprint from ql.workers where id = %s", (worker,))
    assert enrolled_fingerprint == [(der_sha256(cert_path),)], "the certificate on disk is no longer the enrolled one"
    assert cert_path.read_bytes() == enrolled_cert


@db
def test_worker_renew_issues_a_certificate_at_the_same_generation_and_keeps_the_old_one_accepted(
    database: Database, tmp_path: Path
) -> None:
    dsn = database.dsn()
    folder = tmp_path / "pki"
    pki_cli.init_ca(folder)
    worker = done(cli("worker", "enroll", "--dsn", dsn, "--pki", str(folder), "--name", "edge-1"), rf"({UUID})\n")[1]
    cert_path = folder / f"worker-{worker}.crt"
    first = der_sha256(cert_path)
    expiry = x509.load_pem_x509_certificate(cert_path.read_bytes()).not_valid_after_utc
    query = (
        "select generation, cert_fingerprint, previous_cert_fingerprint, cert_not_after_ms"
        " from ql.workers where id = %s"
    )
    assert rows(dsn, query, (worker,)) == [(1, first, None, int(expiry.timestamp() * 1000))], "enrol records the expiry"

    out = cli("worker", "renew", "--dsn", dsn, "--pki", str(folder), "edge-1", "--json")
    renewed = json.loads(done(out, r"(?s)\{.*\}\n")[0])
    second = der_sha256(cert_path)
    new_expiry = x509.load_pem_x509_certificate(cert_path.read_bytes()).not_valid_after_utc
    assert second != first
    assert renewed == {"status": "renewed", "workerId": worker, "generation": 1,
                       "certNotAfterMs": int(new_expiry.timestamp() * 1000), "previousAccepted": True,
                       "certificate": str(cert_path), "key": str(folder / f"worker-{worker}.key")}  # fmt: skip
    assert rows(dsn, query, (worker,)) == [(1, second, first, int(new_expiry.timestamp() * 1000))]
    assert mode(folder / f"worker-{worker}.key") == 0o600
    assert sorted(p.name for p in folder.iterdir() if "pending" in p.name) == [], "no pending file is left"
    listed = json.loads(cli("worker", "list", "--dsn", dsn, "--json").stdout)["workers"]
    assert [w["certNotAfterMs"] for w in listed] == [int(new_expiry.timestamp() * 1000)]
    table_text = cli("worker", "list", "--dsn", dsn).stdout
    assert "CERT EXPIRES" in table_text and new_expiry.strftime("%Y-%m-%d %H:%M:%SZ") in table_text, table_text

    # By id, --verbose: the sentence on stderr; an unknown Worker or no CA is one line and changes nothing.
    out = cli("worker", "renew", "--dsn", dsn, "--pki", str(folder), worker, "--verbose")
    assert (
        out.code == 0 and out.stdout == f"{worker}\n" and out.stderr.startswith(f"renewed worker {worker} generation 1")
    ), out
    before, on_disk = ql_text(dsn), sorted(p.name for p in folder.iterdir())
    refused(cli("worker", "renew", "--dsn", dsn, "--pki", str(folder), "nobody"), 2, "no worker 'nobody'")
    refused(cli("worker", "renew", "--dsn", dsn, "--pki", str(tmp_path / "none"), "edge-1"), 2, "no CA in")
    refused(cli("worker", "renew", "--dsn", UNREACHABLE_DSN, "--pki", str(folder), "edge-1"), 3, "database unreachable")
    assert ql_text(dsn) == before, "a refused renewal changes nothing in the database"
    assert sorted(p.name for p in folder.iterdir()) == on_disk, "a refused renewal leaves no file behind"


def test_worker_enroll_without_a_ca_is_one_line(tmp_path: Path) -> None:
    out = cli("worker", "enroll", "--dsn", UNREACHABLE_DSN, "--pki", str(tmp_path / "none"), "--name", "w")
    refused(out, 2, "no CA in", "qinglong pki init")


# -- converge --------------------------------------------------------------------------------------


@db
def test_converge_once_ends_a_queued_run_with_a_user_cancel_intent(database: Database) -> None:
    dsn = database.dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        revision = make_revision(conn, make_project(conn, "cli-converge"), {"argv": ["true"]})
        cancelled, untouched = make_runs(conn, revision, 2)
        conn.execute("select ql.run_cancel_intent(%s, 'user', 'user', null, ql.now_ms())", (cancelled,))
    done(cli("converge", "--once", "--dsn", dsn), r"one convergence cycle done\n")
    assert rows(dsn, "select status, ended_at_ms is not null from ql.runs where id = %s", (cancelled,)) == [
        ("cancelled", True)
    ]
    assert rows(
        dsn, "select type, actor_kind from ql.run_events where run_id = %s order by sequence", (cancelled,)
    ) == [("run.queued", "system"), ("run.cancel_requested", "user"), ("run.cancelled", "reconciler")]
    assert rows(dsn, "select status from ql.runs where id = %s", (untouched,)) == [("queued",)]


@db
def test_converge_once_refuses_a_grace_below_the_workers_stop_grace_in_one_line(database: Database) -> None:
    dsn = database.dsn()
    before = ql_text(dsn)
    out = cli("converge", "--once", "--dsn", dsn, "--grace-ms", "5999")
    refused(out, 2, "converge refused: ql_api.converge: grace_ms 5999 is below its floor 6000")
    assert ql_text(dsn) == before


# -- db --------------------------------------------------------------------------------------------


@db
def test_db_verify_and_a_revert_deploy_round_trip_on_a_scratch_database(cluster: Cluster, database: Database) -> None:
    target = cluster.sqitch_target(database.name)
    done(cli("db", "verify", "--target", target), rf"sqitch verify: ok \({re.escape(target)}\)\n")
    done(cli("db", "verify", env={"QINGLONG_DB_TARGET": target}), rf"sqitch verify: ok \({re.escape(target)}\)\n")
    deployed = api_functions(database.dsn())

    scratch = f"cli_scratch_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(scratch)))
    try:
        st, sdsn = cluster.sqitch_target(scratch), cluster.dsn(scratch)
        refused(cli("db", "verify", "--target", st), 2, "sqitch verify failed")
        for command in ("deploy", "verify", "revert"):
            done(cli("db", command, "--target", st), rf"sqitch {command}: ok \({re.escape(st)}\)\n")
            if command == "verify":
                assert api_functions(sdsn) == deployed
        assert rows(sdsn, "select nspname::text from pg_catalog.pg_namespace where nspname in ('ql', 'ql_api')") == []
        for command in ("deploy", "verify"):
            done(cli("db", command, "--target", st), rf"sqitch {command}: ok \({re.escape(st)}\)\n")
        assert api_functions(sdsn) == deployed
        status = done(cli("db", "status", "--target", st), r"(?s).*\n")
        assert "Nothing to deploy (up-to-date)" in status[0]

        # A release and back: revert --to the first tag, see what it lacks, deploy again.
        done(
            cli("db", "revert", "--to", "@v0.1.0", "--target", st),
            rf"sqitch revert --to @v0\.1\.0: ok \({re.escape(st)}\)\n",
        )
        status = done(cli("db", "status", "--target", st), r"(?s).*\n")
        assert "Undeployed change" in status[0] and "ql_api/subject_create_v1" in status[0], status[0]
        refused(cli("db", "deploy", "--to", "@no_such_tag", "--target", st), 2, "sqitch deploy failed")
        done(
            cli("db", "deploy", "--to", "@v0.1.0", "--target", st),
            rf"sqitch deploy --to @v0\.1\.0: ok \({re.escape(st)}\)\n",
        )
        done(cli("db", "deploy", "--target", st), rf"sqitch deploy: ok \({re.escape(st)}\)\n")
        assert api_functions(sdsn) == deployed
    finally:
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            conn.execute(sql.SQL("drop database {} with (force)").format(sql.Identifier(scratch)))


def test_db_without_a_target_is_one_line() -> None:
    refused(cli("db", "verify"), 2, "no sqitch target")


# -- bad usage: one line, exit 2, before anything is touched -----------------------------------------


def _task_create(*options: str, project: str = SOME_ID, argv: tuple[str, ...] = ("--", "true")) -> tuple[str, ...]:
    """`task create` against an unreachable database: a usage error must stop it before it connects."""
    return ("task", "create", "--dsn", UNREACHABLE_DSN, "--project", project, "--name", "n", *options, *argv)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        pytest.param((), "required", id="no command"),
        pytest.param(("frobnicate",), "invalid choice", id="unknown group"),
        pytest.param(("project",), "required", id="group without a command"),
        pytest.param(("project", "create", "--dsn", UNREACHABLE_DSN), "name", id="project without a name"),
        *(
            pytest.param(_task_create("--timeout-ms", value), "--timeout-ms", id=f"timeout-ms {value!r}")
            for value in ("abc", "0", "-5", "1.5", "1e3", "", " 5", "\u00b2")
        ),
        pytest.param(_task_create("--retry-backoff-ms", "x"), "--retry-backoff-ms", id="retry-backoff-ms not a number"),
        pytest.param(
            _task_create(project="not a name"), "not a name or id: 'not a name'", id="task create, project not a name"
        ),
        pytest.param(_task_create(argv=()), "argv", id="task create without argv"),
        pytest.param(
            ("subject", "create", "--dsn", UNREACHABLE_DSN, "--name", "a", "--token-file", "t", "--project", "p/1"),
            "not a name or id: 'p/1'",
            id="subject create, project not a name",
        ),
        pytest.param(
            ("subject", "create", "--dsn", UNREACHABLE_DSN, "--kind", "system", "--name", "a", "--token-file", "t"),
            "--kind",
            id="subject create of a system subject",
        ),
        pytest.param(
            ("worker", "enroll", "--dsn", UNREACHABLE_DSN, "--pki", "/nonexistent", "--name", "w", "--id", "w-1"),
            "not a uuid: w-1",
            id="worker enroll with a non-uuid id",
        ),
        pytest.param(
            ("run", "enqueue", "--api", UNREACHABLE_API, "--project", "not a name", "--task", SOME_ID),
            "--project",
            id="run enqueue with a project that is neither a name nor an id",
        ),
        pytest.param(
            ("run", "show", "--api", UNREACHABLE_API, "--project", SOME_ID, "--run", "42"),
            "--run",
            id="run show with a non-uuid run",
        ),
        pytest.param(("converge",), "--once", id="converge without --once"),
        pytest.param(("converge", "--once", "--page-size", "0"), "--page-size", id="converge page size 0"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(args: tuple[str, ...], fragment: str) -> None:
    line = refused(cli(*args), 2, fragment)
    assert line.endswith("(see --help)"), line


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(("project", "create", "p"), id="project create"),
        pytest.param(("task", "create", "--project", SOME_ID, "--name", "n", "--", "true"), id="task create"),
        pytest.param(("subject", "create", "--name", "a", "--token-file", "{tmp}/a.token"), id="subject create"),
        pytest.param(("converge", "--once"), id="converge"),
    ],
)
def test_a_missing_dsn_is_one_line_and_exit_2(args: tuple[str, ...], tmp_path: Path) -> None:
    out = cli(*(a.replace("{tmp}", str(tmp_path)) for a in args))
    assert refused(out, 2) == "qinglong: no database: pass --dsn or set QINGLONG_DSN"
    assert list(tmp_path.iterdir()) == [], "nothing is written"


# -- unreachable services: one line, exit 3 --------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(("project", "create", "p"), id="project create"),
        pytest.param(("task", "create", "--project", SOME_ID, "--name", "n", "--", "true"), id="task create"),
        pytest.param(("subject", "create", "--name", "a", "--token-file", "{tmp}/a.token"), id="subject create"),
        pytest.param(("converge", "--once"), id="converge"),
    ],
)
def test_an_unreachable_database_is_one_line_and_exit_3(args: tuple[str, ...], tmp_path: Path) -> None:
    args = tuple(a.replace("{tmp}", str(tmp_path)) for a in args)
    out = cli(*args[:2], "--dsn", UNREACHABLE_DSN, *args[2:])
    refused(out, 3, "qinglong: database unreachable:", "port 1")
    assert list(tmp_path.iterdir()) == [], "no token file is written when the subject was not registered"


def test_worker_enroll_with_an_unreachable_database_is_one_line_and_exit_3(tmp_path: Path) -> None:
    pki_cli.init_ca(tmp_path)
    out = cli("worker", "enroll", "--dsn", UNREACHABLE_DSN, "--pki", str(tmp_path), "--name", "w")
    refused(out, 3, "qinglong: database unreachable:")


@pytest.mark.parametrize(
    "command",
    [("enqueue", "--task", SOME_ID), ("cancel", "--run", SOME_ID), ("show", "--run", SOME_ID)],
    ids=lambda c: c[0],
)
def test_an_unreachable_shell_is_one_line_and_exit_3(command: tuple[str, ...], pki: Pki, tmp_path: Path) -> None:
    token_file = tmp_path / "t.token"
    token_file.write_text("a-token-of-the-right-shape\n")
    out = cli(
        "run", command[0], "--api", UNREACHABLE_API, "--ca", str(pki.ca), "--token-file", str(token_file),
        "--project", SOME_ID, *command[1:],
    )  # fmt: skip
    refused(out, 3, f"qinglong: shell unreachable at {UNREACHABLE_API}: ")
    assert "a-token-of-the-right-shape" not in out.stderr


def test_the_user_api_without_a_token_is_one_line_and_exit_2(pki: Pki) -> None:
    out = cli("run", "show", "--api", UNREACHABLE_API, "--ca", str(pki.ca), "--project", SOME_ID, "--run", SOME_ID)
    refused(out, 2, "the user API needs --api, --ca and --token-file")


def test_a_missing_token_file_is_one_line_and_exit_2(pki: Pki, tmp_path: Path) -> None:
    out = cli(
        "run", "show", "--api", UNREACHABLE_API, "--ca", str(pki.ca), "--token-file", str(tmp_path / "none"),
        "--project", SOME_ID, "--run", SOME_ID,
    )  # fmt: skip
    refused(out, 2, "No such file or directory", str(tmp_path / "none"))


@pytest.mark.parametrize("ca", ["missing", "not-a-certificate"])
def test_a_bad_ca_file_is_bad_input_exit_2(ca: str, tmp_path: Path) -> None:
    token_file = tmp_path / "t.token"
    token_file.write_text("a-token-of-the-right-shape\n")
    ca_file = tmp_path / "ca.crt"
    if ca == "not-a-certificate":
        ca_file.write_text("not a certificate\n")
    out = cli(
        "run", "show", "--api", UNREACHABLE_API, "--ca", str(ca_file), "--token-file", str(token_file),
        "--project", SOME_ID, "--run", SOME_ID,
    )  # fmt: skip
    refused(out, 2, f"cannot use the CA file {ca_file}")


# -- a DSN the operator functions cannot be called through -------------------------------------------


@db
@pytest.mark.parametrize("kind", ["runtime role", "malformed", "schema not deployed"])
def test_a_dsn_that_cannot_call_the_operator_functions_is_one_line_and_exit_2(
    kind: str, cluster: Cluster, database: Database
) -> None:
    dsn = {
        "runtime role": database.runtime_dsn,
        "malformed": "not a dsn",
        "schema not deployed": cluster.dsn("postgres"),
    }[kind]
    before = ql_text(database.dsn())
    refused(cli("project", "create", "--dsn", dsn, "cli-nope"), 2)
    assert ql_text(database.dsn()) == before


# -- run enqueue | cancel | show through the in-process shell's user API ---------------------------


def _api_args(shell: Shell, pki: Pki, token_file: Path, project: str) -> tuple[str, ...]:
    return ("--api", shell.user_url, "--ca", str(pki.ca), "--token-file", str(token_file), "--project", project)


def _columns(line: str) -> tuple[str, str, str]:
    """A timeline row's sequence, event and actor (the time is the second column)."""
    cells = line.split()
    return (cells[0], cells[2], cells[3])


def _token_file(tmp_path: Path, name: str, token: str) -> Path:
    path = tmp_path / f"{name}.token"
    path.write_text(token + "\n")
    path.chmod(0o600)
    return path


@db
async def test_run_enqueue_cancel_show_and_converge_through_the_cli(
    shell: Shell, seed: Seed, pki: Pki, database: Database, tmp_path: Path
) -> None:
    api = _api_args(shell, pki, _token_file(tmp_path, "operator", seed.operator.token), seed.project_p)

    run = done(await acli("run", "enqueue", *api, "--task", seed.task_p), rf"({UUID})\n")[1]
    assert rows(
        database.dsn(),
        "select r.project_id::text, r.task_id::text, r.status, r.task_revision_id = t.current_revision_id"
        " from ql.runs r join ql.tasks t on t.id = r.task_id where r.id = %s",
        (run,),
    ) == [(seed.project_p, seed.task_p, "queued", True)]

    done(await acli("run", "cancel", *api, "--run", run), rf"run {run}: accepted \(status queued\)\n")
    done(await acli("run", "cancel", *api, "--run", run), rf"run {run}: already_requested \(status queued\)\n")

    show = await acli("run", "show", *api, "--run", run)
    assert show.code == 0 and show.stderr == "", show
    shown = show.stdout.splitlines()
    assert shown[0] == f"run {run}: queued (version 3, 2 events)", shown
    assert shown[1].split() == ["#", "AT", "(UTC)", "EVENT", "ACTOR", "DETAIL"], shown
    assert [_columns(line) for line in shown[2:]] == [
        ("1", "run.queued", "user"),
        ("2", "run.cancel_requested", "user"),
    ], shown
    assert "reason=user" in shown[3], shown

    show = await acli("run", "show", *api, "--run", run, "--json")
    assert show.code == 0 and show.stderr == "", show
    timeline = json.loads(show.stdout)
    assert timeline["run"]["runId"] == run and timeline["run"]["cancelReason"] == "user", timeline
    assert [e["type"] for e in timeline["events"]] == ["run.queued", "run.cancel_requested"]
    assert timeline["truncated"] is False

    # Nothing holds the Run: one convergence cycle ends it, and the timeline shows it.
    done(await acli("converge", "--once", "--dsn", database.dsn()), r"one convergence cycle done\n")
    show = await acli("run", "show", *api, "--run", run)
    assert show.code == 0 and show.stderr == "", show
    shown = show.stdout.splitlines()
    assert shown[0] == f"run {run}: cancelled (version 4, 3 events)", shown
    assert [_columns(line) for line in shown[2:]] == [
        ("1", "run.queued", "user"),
        ("2", "run.cancel_requested", "user"),
        ("3", "run.cancelled", "reconciler"),
    ], shown


@db
async def test_run_commands_refused_by_the_user_api_are_one_line_and_exit_2(
    shell: Shell, seed: Seed, pki: Pki, database: Database, tmp_path: Path
) -> None:
    operator = _api_args(shell, pki, _token_file(tmp_path, "operator", seed.operator.token), seed.project_p)
    viewer = _api_args(shell, pki, _token_file(tmp_path, "viewer", seed.viewer.token), seed.project_p)
    stranger = _api_args(shell, pki, _token_file(tmp_path, "stranger", "not-a-known-token"), seed.project_p)
    runs_before = rows(database.dsn(), "select count(*) from ql.runs")

    p = seed.project_p
    assert refused(await acli("run", "enqueue", *operator, "--task", SOME_ID), 2) == (
        f"qinglong: no task '{SOME_ID}' in project {p}"
    )
    assert refused(await acli("run", "enqueue", *operator, "--task", seed.task_q), 2) == (
        f"qinglong: no task '{seed.task_q}' in project {p}"
    ), "another Project's task is not found either"
    assert refused(await acli("run", "enqueue", *viewer, "--task", seed.task_p), 2) == (
        f"qinglong: run enqueue of task {seed.task_p} in project {p}: refused (403 denied): your role there does not"
        " allow it: an owner or admin can grant one (`qinglong role set`)"
    )
    refused(await acli("run", "enqueue", *stranger, "--task", seed.task_p), 2,
            "refused (401 auth.unauthenticated): the shell knows no active subject with this bearer token")  # fmt: skip
    assert rows(database.dsn(), "select count(*) from ql.runs") == runs_before, "no Run was queued"

    assert refused(await acli("run", "show", *operator, "--run", seed.runs_q[0]), 2) == (
        f"qinglong: no Run {seed.runs_q[0]} in project {p} (`qinglong run list --project {p}` lists its Runs)"
    ), "another Project's Run is not found"
    assert refused(await acli("run", "cancel", *operator, "--run", SOME_ID), 2).startswith(
        f"qinglong: no Run {SOME_ID} in project {p}"
    )
    refused(await acli("run", "cancel", *viewer, "--run", seed.runs_p[0]), 2, "refused (403 denied): your role")
    assert rows(database.dsn(), "select count(*) from ql.runs where cancel_requested_at_ms is not null") == [(0,)]
