"""Unauthenticated user-API requests (decision 0006) over real TLS 1.3 sockets: a request without exactly one
well-formed `Authorization: Bearer <token>` is 401 auth.unauthenticated (qinglong/error@v1) with no database
call; an unknown token or a disabled subject is 401 and writes nothing; a known subject's decisions are still
audited, one row each. Every refusal is counted (qinglong_shell_unauthenticated_total{reason}) and logged at
most once a minute per reason, with the peer address and never the header. A flood of 500 on one keep-alive
connection writes no row. The CLI never sends an empty token.
Touches: a fresh database, the in-process shell on loopback, the shell's log, one CLI child process.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import aiohttp
import psycopg
import pytest

from qinglong.shell.db import Database
from qinglong.wire import ErrorMessage
from qinglong.wire.logline import settled
from tests.conftest import Database as PgDatabase
from tests.integration.db.factories import Subject, set_role
from tests.integration.shell.conftest import (
    Logs,
    Pki,
    Seed,
    Shell,
    audit_rows,
    image_diff,
    ql_image,
    serve_shell,
    user_call,
    user_http,
)

pytestmark = pytest.mark.db

REASONS: Final = ("missing", "malformed", "unknown_token", "subject_disabled")
_COUNTER: Final = re.compile(r'^qinglong_shell_unauthenticated_total\{reason="([a-z_]+)"\} ([0-9.e+]+)$', re.M)
_ADMISSIONS: Final = re.compile(
    r'^qinglong_shell_db_seconds_count\{function="request_admission_v1"\} ([0-9.e+]+)$', re.M
)
UNKNOWN: Final = "u" * 43  # well-formed, and no subject holds it


def _malformed(real_token: str) -> dict[str, Sequence[bytes]]:
    """Authorization headers (raw bytes, each a separate header line) that are not one well-formed bearer token."""
    return {
        "Bearer and nothing": [b"Bearer"],
        "Bearer and a space": [b"Bearer "],
        "Basic scheme, a real token": [b"Basic " + real_token.encode()],
        "lower-case scheme, a real token": [b"bearer " + real_token.encode()],
        "no scheme, a real token": [real_token.encode()],
        "two spaces": [b"Bearer  " + real_token.encode()],
        "bad character !": [b"Bearer " + b"a" * 20 + b"!"],
        "bad character space": [b"Bearer " + b"a" * 20 + b" b"],
        "bad character %": [b"Bearer " + b"a" * 20 + b"%41"],
        "padding inside": [b"Bearer " + b"a" * 20 + b"=a"],
        "non-ASCII": [b"Bearer " + "é".encode() * 20],
        "15 characters": [b"Bearer " + b"a" * 15],
        "513 characters": [b"Bearer " + b"a" * 513],
        "6000 characters": [b"Bearer " + b"A" * 6000],
        "two headers, a real token each": [b"Bearer " + real_token.encode()] * 2,
    }


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes


class RawUser:
    """One keep-alive TLS 1.3 connection to the user API that sends exactly the header bytes it is given."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def get(self, path: str, authorization: Sequence[bytes] = ()) -> Answer:
        head = b"GET " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        head += b"".join(b"Authorization: " + value + b"\r\n" for value in authorization)
        self.writer.write(head + b"\r\n")
        status_line, _, rest = (await self.reader.readuntil(b"\r\n\r\n")).partition(b"\r\n")
        headers = dict(line.split(b": ", 1) for line in rest.strip().split(b"\r\n"))
        assert headers.get(b"Connection", b"").lower() != b"close", headers  # the connection stays open
        body = await self.reader.readexactly(int(headers[b"Content-Length"]))
        return Answer(int(status_line.split()[1]), body)


@pytest.fixture
async def raw(pki: Pki, shell: Shell) -> AsyncIterator[RawUser]:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", shell.user_port, ssl=pki.client_context(), server_hostname="127.0.0.1"
    )
    try:
        yield RawUser(reader, writer)
    finally:
        writer.close()


@dataclass(frozen=True)
class Counts:
    unauthenticated: dict[str, float]
    admissions: float  # calls of request_admission_v1 the shell made


async def counts(shell: Shell) -> Counts:
    async with aiohttp.ClientSession() as admin, admin.get(shell.admin_url + "/metrics") as resp:
        text = await resp.text()
    found = dict(_COUNTER.findall(text))
    admissions = _ADMISSIONS.search(text)
    return Counts({r: float(found.get(r, 0)) for r in REASONS}, float(admissions[1]) if admissions else 0.0)


def delta(before: Counts, after: Counts) -> tuple[dict[str, float], float]:
    changed = {r: after.unauthenticated[r] - before.unauthenticated[r] for r in REASONS}
    return {r: n for r, n in changed.items() if n}, after.admissions - before.admissions


def unauthenticated_error(answer: Answer) -> ErrorMessage:
    assert answer.status == 401, answer
    error = ErrorMessage.parse(answer.body)  # qinglong/error@v1, exactly
    assert error.code == "auth.unauthenticated" and error.request_id, error
    return error


def log_lines(logs: Logs) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in logs.shell.lines if line.startswith("{")]
    return [line for line in lines if line.get("event") == "auth.unauthenticated"]


@pytest.fixture(autouse=True)
def fresh_log_keys() -> None:
    """The log is rate-limited per reason across the process: each test starts with every reason unheld."""
    for reason in REASONS:
        settled(f"unauthenticated:{reason}")
    settled("request:user.runs.read:401")


def _read(seed: Seed) -> str:
    return f"/api/v3/projects/{seed.project_p}/runs/{seed.runs_p[0]}"


async def test_no_well_formed_bearer_token_is_401_without_a_database_call(
    raw: RawUser, pki: Pki, shell: Shell, seed: Seed, database: PgDatabase, logs: Logs
) -> None:
    cases = _malformed(seed.operator.token)
    image, before = await ql_image(database.dsn()), await counts(shell)
    missing = unauthenticated_error(await raw.get(_read(seed)))
    for name, header in cases.items():
        error = unauthenticated_error(await raw.get(_read(seed), header))
        assert error.message == missing.message, name
    # The enqueue route, with a body that is never read.
    async with user_http(pki) as http:
        body = {"schema": "qinglong/run-enqueue@v1", "taskId": seed.task_p, "mutationId": "no-token"}
        reply = await user_call(http, shell, "POST", f"/api/v3/projects/{seed.project_p}/runs", token=None, body=body)
    assert (reply.status, reply.code) == (401, "auth.unauthenticated"), reply
    assert delta(before, await counts(shell)) == ({"missing": 2, "malformed": len(cases)}, 0)  # no admission call
    assert image_diff(image, await ql_image(database.dsn())) == {}  # no row anywhere, audit included
    lines = log_lines(logs)
    assert [(line["reason"], line["peer"]) for line in lines] == [("missing", "127.0.0.1"), ("malformed", "127.0.0.1")]
    assert lines[0]["route"] == "user.runs.read" and lines[0]["request_id"] == missing.request_id
    everything = logs.everything.text
    assert seed.operator.token not in everything and "a" * 20 not in everything and "A" * 100 not in everything


async def test_an_unknown_token_or_a_disabled_subject_is_401_and_writes_nothing(
    raw: RawUser, shell: Shell, seed: Seed, database: PgDatabase, logs: Logs
) -> None:
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        token = "disabled-" + "d" * 40
        row = conn.execute(
            "insert into ql.subjects (kind, name, token_digest) values ('user', 'gone', sha256(%s)) returning id",
            (token.encode(),),
        ).fetchone()
        assert row is not None
        disabled = Subject(row[0], token)
        set_role(conn, uuid.UUID(seed.project_p), disabled, "operator", True)
        conn.execute("update ql.subjects set status = 'disabled' where id = %s", (disabled.id,))
    image, before = await ql_image(database.dsn()), await counts(shell)
    unknown = unauthenticated_error(await raw.get(_read(seed), [b"Bearer " + UNKNOWN.encode()]))
    gone = unauthenticated_error(await raw.get(_read(seed), [b"Bearer " + disabled.token.encode()]))
    assert (unknown.message, gone.message) == ("auth.unknown_token", "auth.subject_disabled")
    assert delta(before, await counts(shell)) == ({"unknown_token": 1, "subject_disabled": 1}, 2)
    assert image_diff(image, await ql_image(database.dsn())) == {}
    lines = log_lines(logs)
    assert [(line["reason"], line["peer"], line.get("subject_id")) for line in lines] == [
        ("unknown_token", "127.0.0.1", None),
        ("subject_disabled", "127.0.0.1", str(disabled.id)),
    ]
    assert UNKNOWN not in logs.everything.text and disabled.token not in logs.everything.text


async def test_a_known_subjects_decisions_are_still_audited(
    pki: Pki, shell: Shell, seed: Seed, database: PgDatabase
) -> None:
    image, before = await ql_image(database.dsn()), await counts(shell)
    async with user_http(pki) as http:
        read = await user_call(http, shell, "GET", _read(seed), token=seed.operator.token)
        assert read.status == 200, read
        cancel = f"/api/v3/projects/{seed.project_p}/runs/{seed.runs_p[0]}/cancellation"
        body = {"schema": "qinglong/run-cancellation@v1", "mutationId": "viewer-stop"}
        denied = await user_call(http, shell, "POST", cancel, token=seed.viewer.token, body=body)
        assert (denied.status, denied.code) == (403, "denied"), denied
    assert image_diff(image, await ql_image(database.dsn())) == {"security_audit": 2}
    assert delta(before, await counts(shell)) == ({}, 2)
    reads = await audit_rows(database.dsn(), "user.runs.read")
    cancels = await audit_rows(database.dsn(), "user.runs.cancel")
    assert [(r["subject_id"], r["decision"], r["reason"]) for r in reads] == [(str(seed.operator.id), "allow", "ok")]
    assert [(r["subject_id"], r["decision"], r["reason"], r["request_id"]) for r in cancels] == [
        (str(seed.viewer.id), "deny", "role.insufficient", denied.json()["requestId"])
    ]


async def test_a_flood_on_one_keep_alive_connection_writes_no_row(
    raw: RawUser, shell: Shell, seed: Seed, database: PgDatabase, logs: Logs
) -> None:
    image, before = await ql_image(database.dsn()), await counts(shell)
    headers = ([b"Bearer " + b"x" * 10], [b"Bearer " + UNKNOWN.encode()])  # malformed, then well-formed and unknown
    for i in range(500):
        unauthenticated_error(await raw.get(_read(seed), headers[i % 2]))
    assert delta(before, await counts(shell)) == ({"malformed": 250, "unknown_token": 250}, 250)
    assert image_diff(image, await ql_image(database.dsn())) == {}  # no row: no audit row, no aggregate
    assert [line["reason"] for line in log_lines(logs)] == ["malformed", "unknown_token"]  # once a minute each
    lines = [json.loads(line) for line in logs.shell.lines if line.startswith("{")]
    requests = [(line["route"], line["status"]) for line in lines if line["event"] == "request"]
    assert requests == [("user.runs.read", 401)]  # the access line too: once a minute per route and status


async def test_without_a_token_the_shell_never_reaches_the_database(pki: Pki) -> None:
    """A shell whose database is unreachable: no well-formed token is still 401, a well-formed one is 503."""
    db = Database("host=127.0.0.1 port=1 user=nobody dbname=nothing connect_timeout=1", timeout=0.5)
    async with serve_shell(db, pki) as shell, user_http(pki) as http:
        path = f"/api/v3/projects/{'0' * 8}-0000-4000-8000-{'0' * 12}/runs/{'1' * 8}-1111-4111-8111-{'1' * 12}"
        for token in (None, "x" * 15):
            reply = await user_call(http, shell, "GET", path, token=token)
            assert (reply.status, reply.code) == (401, "auth.unauthenticated"), reply
        reply = await user_call(http, shell, "GET", path, token=UNKNOWN)
        assert (reply.status, reply.code) == (503, "storage.unavailable"), reply


NEEDS = "qinglong: the user API needs --api, --ca and --token-file (or QINGLONG_TOKEN)"
MALFORMED = (
    "qinglong: the token (--token-file or QINGLONG_TOKEN) is not a bearer token: 16 to 512 of A-Z a-z 0-9 . _ ~ + / -"
)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("", NEEDS),
        ("\n", NEEDS),
        ("  \t\n", NEEDS),
        ("a" * 20 + "\n" + "b" * 20, MALFORMED),  # a line break inside would split the header
        ("\u00fc" * 20, MALFORMED),  # not Latin-1/ASCII: would not even encode as a header
        ("short", MALFORMED),
    ],
)
async def test_the_cli_never_sends_an_empty_or_malformed_token(
    content: str, says: str, pki: Pki, shell: Shell, seed: Seed, tmp_path: Path
) -> None:
    token_file = tmp_path / "empty.token"
    token_file.write_text(content)
    before = await counts(shell)
    env = {k: v for k, v in os.environ.items() if not k.startswith("QINGLONG_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "qinglong.cli", "run", "show", "--api", shell.user_url, "--ca", str(pki.ca),
        "--token-file", str(token_file), "--project", seed.project_p, "--run", seed.runs_p[0],
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert (proc.returncode, out) == (2, b""), (proc.returncode, out, err)
    assert err.decode().splitlines() == [says]
    assert delta(before, await counts(shell)) == ({}, 0)  # nothing reached the shell's admission
