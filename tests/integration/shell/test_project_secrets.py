"""Project secrets through the real shell (docs/operations.md, "Project secrets"): the user API sets (a new sealed
version each time, a replay answering the first version, a reused mutation id fenced), lists (never a value) and
deletes secrets under the roles' permissions (secret.write: owner, admin; secret.read: every role); bad input is a
typed 400 that changes nothing but the committed audit row; a shell without [secrets] answers
secrets.unconfigured; the starting ACK of a plan naming secrets delivers their opened values to the Worker, its
replays the same versions after a newer one was set, and a fenced call nothing; a key-encryption-key rotation's
rewrap pass moves every version (paging past one it cannot open), after which delivery works with the old key
dropped; and no value, in any encoding, reaches PostgreSQL's statement log or any log record of the process.
Real PostgreSQL, real TLS 1.3 (the in-process shell of conftest.py). Touches: fresh databases (the session
cluster's; the private cluster's, whose log is read), loopback ports, log handlers.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import signal
import socket
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import aiohttp
import psycopg
import pytest

from qinglong.shell.db import Database
from qinglong.shell.rewrap import rewrap_pass
from qinglong.shell.sealing import Sealed, Sealer, kek_id, new_kek, read_kek
from qinglong.wire import ActivationResponse
from qinglong.wire.common import SECRET_VALUE_MAX_BYTES
from tests.conftest import Database as PgDatabase
from tests.integration.db.factories import Subject, make_revision, make_runs, make_user, set_role
from tests.integration.shell.conftest import (
    Logs,
    Offered,
    Pki,
    PrivateCluster,
    Reply,
    Seed,
    Shell,
    WorkerClient,
    image_diff,
    ql_image,
    seed_database,
    serve_shell,
    user_call,
    user_http,
)
from tests.support.env import free_port

pytestmark = pytest.mark.db

SCHEMA: Final = "qinglong/secret@v1"
SERVE: Final = (sys.executable, "-m", "qinglong.cli", "shell", "serve", "--config")
POOL: Final = "secrets"
# A plan naming two secrets, in the pool only Worker B serves (the seeded Runs are in the default pool).
SECRET_PLAN: Final = {
    "argv": ["true"],
    "timeoutMs": 60000,
    "pool": POOL,
    "secretEnv": {"PGPASSWORD": "DB_PASSWORD"},
    "secretFiles": {"conf/api.key": "API_KEY"},
}


@dataclass(frozen=True)
class People:
    """Subjects of Project P beyond the seeded operator, viewer and agent: an owner and an admin."""

    owner: Subject
    admin: Subject


def add_writers(dsn: str, project: str) -> People:
    with psycopg.connect(dsn, autocommit=True) as conn:
        owner, admin = make_user(conn), make_user(conn)
        set_role(conn, uuid.UUID(project), owner, "owner", True)
        set_role(conn, uuid.UUID(project), admin, "admin", True)
    return People(owner, admin)


def value_of(tag: str, size: int = 0) -> bytes:
    """A recognisable random value: a tag, 16 random bytes and, to reach `size`, random bytes."""
    head = f"qinglong-test-{tag}-".encode() + os.urandom(16)
    return head + os.urandom(max(0, size - len(head)))


def b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


async def put_secret(
    http: aiohttp.ClientSession, shell: Shell, project: str, name: str, value: bytes, *, token: str, mutation: str
) -> Reply:
    body = {"schema": SCHEMA, "mutationId": mutation, "value": b64(value)}
    return await user_call(http, shell, "PUT", f"/api/v3/projects/{project}/secrets/{name}", token=token, body=body)


async def delete_secret(
    http: aiohttp.ClientSession, shell: Shell, project: str, name: str, *, token: str, mutation: str
) -> Reply:
    path = f"/api/v3/projects/{project}/secrets/{name}/deletion"
    return await user_call(http, shell, "POST", path, token=token, body={"schema": SCHEMA, "mutationId": mutation})


async def list_secrets(http: aiohttp.ClientSession, shell: Shell, project: str, *, token: str) -> Reply:
    return await user_call(http, shell, "GET", f"/api/v3/projects/{project}/secrets", token=token)


@dataclass(frozen=True)
class VersionRow:
    version_id: str
    project_id: str
    name: str
    version: int
    size: int
    kek_id: str | None
    sealed: Sealed | None


def version_rows(dsn: str) -> list[VersionRow]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "select v.id::text, s.project_id::text, s.name, v.version, v.size, v.kek_id, v.wrapped_key, v.nonce,"
            " v.ciphertext from ql.secret_versions v join ql.secrets s on s.id = v.secret_id"
            " order by s.name, v.version"
        ).fetchall()
    return [
        VersionRow(r[0], r[1], r[2], r[3], r[4], r[5], None if r[5] is None else Sealed(r[5], r[6], r[7], r[8]))
        for r in rows
    ]


def opened(sealer: Sealer, row: VersionRow) -> bytes:
    assert row.sealed is not None, row
    return sealer.open(row.sealed, project_id=row.project_id, name=row.name, version_id=row.version_id)


def subject_name(dsn: str, subject: Subject) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("select name from ql.subjects where id = %s", (subject.id,)).fetchone()
    assert row is not None
    return str(row[0])


def secret_run(dsn: str, project: str, plan: dict[str, Any] = SECRET_PLAN) -> str:
    """A queued Run of a new task of `plan` (written as the superuser: task_create_v1's own check that its secrets
    exist is pgTAP's), and Worker B moved to the plan's pool."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        (run,) = make_runs(conn, make_revision(conn, uuid.UUID(project), plan), 1)
        conn.execute("update ql.workers set pool = %s where name = 'worker-b'", (plan.get("pool", "default"),))
    return str(run)


async def started(worker: WorkerClient, run: str) -> tuple[Offered, Reply]:
    """Open a session, pull the Run and send its starting ACK: the offer and the answer."""
    assert (await worker.open()).status == 200
    offered = await worker.pull()
    assert offered.offer["runId"] == run, offered.offer
    return offered, await worker.activate(offered, "starting")


def delivered(reply: Reply) -> dict[str, tuple[int, bytes]]:
    """The secrets an activation answer delivers, by name: (version, value)."""
    assert reply.status == 200, reply
    answer = ActivationResponse.parse(reply.body)
    return {s.name: (s.version, s.value) for s in answer.secrets or ()}


@pytest.fixture
async def writers(database: PgDatabase, seed: Seed) -> People:
    return add_writers(database.dsn(), seed.project_p)


@pytest.fixture
async def http(pki: Pki) -> AsyncIterator[aiohttp.ClientSession]:
    async with user_http(pki) as session:
        yield session


# -- the user API --------------------------------------------------------------------------------------------------


async def test_a_set_makes_a_sealed_version_and_a_replay_answers_the_first(
    database: PgDatabase, shell: Shell, seed: Seed, writers: People, http: aiohttp.ClientSession
) -> None:
    first, second = value_of("first"), value_of("second", 300)
    p, owner = seed.project_p, writers.owner.token
    made = await put_secret(http, shell, p, "DB_PASSWORD", first, token=owner, mutation="set-1")
    assert made.status == 202, made
    answer = made.json()
    assert {k: v for k, v in answer.items() if k != "setAtMs"} == {
        "schema": SCHEMA, "status": "set", "name": "DB_PASSWORD", "version": 1, "size": len(first)
    }  # fmt: skip
    by_name = await put_secret(http, shell, "project-p", "DB_PASSWORD", second, token=writers.admin.token,
                               mutation="set-2")  # fmt: skip
    assert (by_name.status, by_name.json()["status"], by_name.json()["version"]) == (202, "set", 2), by_name
    replay = await put_secret(http, shell, p, "DB_PASSWORD", first, token=owner, mutation="set-1")
    assert replay.status == 200 and replay.json() == {**answer, "status": "already_set"}, replay
    for name, value in (("OTHER", first), ("DB_PASSWORD", second)):  # another command under a used mutation id
        conflict = await put_secret(http, shell, p, name, value, token=owner, mutation="set-1")
        assert (conflict.status, conflict.code) == (409, "fenced.mutation_conflict"), conflict

    assert shell.sealer is not None
    rows = version_rows(database.dsn())
    assert [(r.name, r.version, r.size) for r in rows] == [("DB_PASSWORD", 1, len(first)), ("DB_PASSWORD", 2, 300)]
    old, current = rows
    assert old.sealed is None  # no live Attempt holds version 1: its sealed bytes are gone
    assert current.project_id == p and current.kek_id == shell.sealer.current_id
    assert opened(shell.sealer, current) == second
    assert current.sealed is not None and len(current.sealed.ciphertext) == 300 + 16


async def test_a_list_names_versions_and_sizes_never_a_value(
    database: PgDatabase, shell: Shell, seed: Seed, writers: People, http: aiohttp.ClientSession
) -> None:
    values = {"API_KEY": value_of("api"), "DB_PASSWORD": value_of("db", 64)}
    owner_name = subject_name(database.dsn(), writers.owner)
    for n, (name, value) in enumerate(values.items()):
        reply = await put_secret(http, shell, seed.project_p, name, value, token=writers.owner.token, mutation=f"m{n}")
        assert reply.status == 202, reply
    for token in (seed.viewer.token, seed.operator.token, seed.agent.token, writers.owner.token):
        listed = await list_secrets(http, shell, "project-p", token=token)
        assert listed.status == 200, listed
        body = listed.json()
        assert (body["status"], body["projectId"], body["project"]) == ("listed", seed.project_p, "project-p")
        assert {s["setBy"] for s in body["secrets"]} == {owner_name}
        assert [(s["name"], s["version"], s["size"]) for s in body["secrets"]] == [
            ("API_KEY", 1, len(values["API_KEY"])), ("DB_PASSWORD", 1, 64)
        ]  # fmt: skip
        for value in values.values():
            assert value not in listed.body and b64(value).encode() not in listed.body and value.hex() not in body
    other = await list_secrets(http, shell, seed.project_q, token=writers.owner.token)  # no binding on Q
    assert (other.status, other.code) == (404, "not_found"), other


async def test_a_delete_destroys_every_version_and_is_idempotent(
    database: PgDatabase, shell: Shell, seed: Seed, writers: People, http: aiohttp.ClientSession
) -> None:
    p, owner = seed.project_p, writers.owner.token
    assert (await put_secret(http, shell, p, "API_KEY", value_of("a"), token=owner, mutation="s")).status == 202
    deleted = await delete_secret(http, shell, p, "API_KEY", token=owner, mutation="d-1")
    assert deleted.status == 202 and deleted.json() == {"schema": SCHEMA, "status": "deleted", "name": "API_KEY"}
    again = await delete_secret(http, shell, p, "API_KEY", token=writers.admin.token, mutation="d-2")
    assert again.status == 200 and again.json()["status"] == "already_deleted", again
    replay = await delete_secret(http, shell, p, "API_KEY", token=owner, mutation="d-1")  # the first answer
    assert replay.status == 202 and replay.json() == deleted.json(), replay
    missing = await delete_secret(http, shell, p, "NEVER_SET", token=owner, mutation="d-3")
    assert (missing.status, missing.code) == (404, "not_found"), missing
    assert (await list_secrets(http, shell, p, token=owner)).json()["secrets"] == []
    assert [(r.name, r.sealed) for r in version_rows(database.dsn())] == [("API_KEY", None)]


async def test_only_owners_and_admins_write_and_every_role_reads(
    database: PgDatabase, shell: Shell, seed: Seed, writers: People, http: aiohttp.ClientSession
) -> None:
    p = seed.project_p
    made = await put_secret(http, shell, p, "TOKEN", value_of("t"), token=writers.owner.token, mutation="s")
    assert made.status == 202, made
    before = await ql_image(database.dsn())
    for subject in (seed.viewer, seed.operator, seed.agent):
        denied = await put_secret(http, shell, p, "TOKEN", value_of("x"), token=subject.token, mutation="m")
        assert (denied.status, denied.code) == (403, "denied"), denied
        denied = await delete_secret(http, shell, p, "TOKEN", token=subject.token, mutation="m")
        assert (denied.status, denied.code) == (403, "denied"), denied
        assert (await list_secrets(http, shell, p, token=subject.token)).status == 200
    # Each refusal, and each read, is only its audit row.
    assert image_diff(before, await ql_image(database.dsn())) == {"security_audit": 9}
    for subject in (seed.viewer, writers.owner):  # another Project's secrets are missing, not forbidden
        refused = await put_secret(http, shell, seed.project_q, "TOKEN", value_of("q"), token=subject.token,
                                   mutation="q")  # fmt: skip
        assert (refused.status, refused.code) == (404, "not_found"), refused
    unknown = "an-unknown-bearer-token-0123456789"
    unauthenticated = await put_secret(http, shell, p, "TOKEN", value_of("u"), token=unknown, mutation="u")
    assert (unauthenticated.status, unauthenticated.code) == (401, "auth.unauthenticated")
    assert [r.version for r in version_rows(database.dsn())] == [1]


@pytest.mark.parametrize(
    ("name", "value", "code"),
    [
        ("db_password", b64(b"x"), "wire.bad_pattern"),  # refused before admission: no audit row either
        ("1PASSWORD", b64(b"x"), "wire.bad_pattern"),
        ("DB-PASSWORD", b64(b"x"), "wire.bad_pattern"),
        ("A" * 65, b64(b"x"), "wire.bad_pattern"),
        ("DB_PASSWORD", "", "wire.too_short"),  # an empty value
        ("DB_PASSWORD", b64(b"y" * (SECRET_VALUE_MAX_BYTES + 1)), "wire.too_long"),
        ("DB_PASSWORD", b64(b"y" * 40).rstrip("="), "wire.bad_base64"),
        ("DB_PASSWORD", "not base64 at all!", "wire.bad_base64"),
        ("DB_PASSWORD", base64.urlsafe_b64encode(b"\xfb\xff\xfe" * 9).decode(), "wire.bad_base64"),
        ("DB_PASSWORD", None, "wire.bad_type"),
        ("DB_PASSWORD", "A" * (100 * 1024), "request.too_large"),  # over the 96 KiB cap: never buffered
    ],
)
async def test_bad_input_is_a_typed_400_and_changes_nothing(
    database: PgDatabase, shell: Shell, seed: Seed, writers: People, http: aiohttp.ClientSession,
    name: str, value: str | None, code: str,
) -> None:  # fmt: skip
    before = await ql_image(database.dsn())
    body = {"schema": SCHEMA, "mutationId": "bad-1", "value": value}
    path = f"/api/v3/projects/{seed.project_p}/secrets/{name}"
    reply = await user_call(http, shell, "PUT", path, token=writers.owner.token, body=body)
    assert (reply.status, reply.code) == (400 if code != "request.too_large" else 413, code), reply
    assert not value or value[:24] not in reply.body.decode()
    audited = {} if code == "wire.bad_pattern" else {"security_audit": 1}  # admission is committed first
    assert image_diff(before, await ql_image(database.dsn())) == audited


async def test_a_value_of_exactly_64_kib_is_set(
    database: PgDatabase, shell: Shell, seed: Seed, writers: People, http: aiohttp.ClientSession
) -> None:
    value = os.urandom(SECRET_VALUE_MAX_BYTES)
    reply = await put_secret(http, shell, seed.project_p, "BIG", value, token=writers.owner.token, mutation="big")
    assert reply.status == 202 and reply.json()["size"] == SECRET_VALUE_MAX_BYTES, reply
    assert shell.sealer is not None and opened(shell.sealer, version_rows(database.dsn())[0]) == value


# -- a shell without [secrets] ---------------------------------------------------------------------------------------


async def test_a_shell_without_keys_seals_and_opens_nothing_and_says_so(
    database: PgDatabase, pki: Pki, seed: Seed, logs: Logs
) -> None:
    writers = add_writers(database.dsn(), seed.project_p)
    sealer = Sealer(os.urandom(32))
    run = secret_run(database.dsn(), seed.project_p)
    async with (
        serve_shell(Database(database.runtime_dsn), pki, sealer=sealer) as keyed,
        user_http(pki) as http,
    ):
        for name in ("DB_PASSWORD", "API_KEY"):
            reply = await put_secret(http, keyed, seed.project_p, name, value_of(name), token=writers.owner.token,
                                     mutation=name)  # fmt: skip
            assert reply.status == 202, reply
    async with (
        serve_shell(Database(database.runtime_dsn), pki) as bare,
        user_http(pki) as http,
        WorkerClient(bare, seed.worker_b, pki.client_context(pki.worker_b)) as worker,
    ):
        before = await ql_image(database.dsn())
        refused = await put_secret(http, bare, seed.project_p, "DB_PASSWORD", value_of("x"), token=writers.owner.token,
                                   mutation="unconfigured")  # fmt: skip
        assert (refused.status, refused.code) == (503, "secrets.unconfigured"), refused
        assert image_diff(before, await ql_image(database.dsn())) == {"security_audit": 1}
        listed = await list_secrets(http, bare, seed.project_p, token=seed.viewer.token)  # needs no key
        assert [s["name"] for s in listed.json()["secrets"]] == ["API_KEY", "DB_PASSWORD"]
        # A starting ACK whose answer carries sealed values is refused with the same code, never a 500; its replay
        # too. (The Worker reports a start failure, or a shell holding the key answers a later replay.)
        offered, starting = await started(worker, run)
        assert (starting.status, starting.code) == (503, "secrets.unconfigured"), starting
        again = await worker.activate(offered, "starting")
        assert (again.status, again.code) == (503, "secrets.unconfigured"), again
        # A plan naming no secret starts as ever.
        plain = secret_run(database.dsn(), seed.project_p, {"argv": ["true"], "pool": "plain"})
        other = WorkerClient(bare, seed.worker_b, pki.client_context(pki.worker_b))
        async with other:
            _, ack = await started(other, plain)
        assert ack.status == 200 and "secrets" not in ack.json() and ack.json()["status"] == "applied", ack
    async with (
        serve_shell(Database(database.runtime_dsn), pki, sealer=sealer) as keyed,
        WorkerClient(keyed, seed.worker_b, pki.client_context(pki.worker_b)) as worker,
    ):
        assert (await worker.open()).status == 200  # a new session: the Attempt belongs to the Worker, not to it
        replay = await worker.activate(offered, "starting")
        assert set(delivered(replay)) == {"API_KEY", "DB_PASSWORD"}, replay
    refusals = [json.loads(line) for line in logs.shell.lines if "secret_refused" in line]
    assert refusals and {r["code"] for r in refusals} == {"secrets.unconfigured"}, logs.shell.lines


# -- delivery to a Worker --------------------------------------------------------------------------------------------


async def test_a_starting_ack_delivers_the_opened_values_and_its_replays_the_same_versions(
    database: PgDatabase, pki: Pki, shell: Shell, seed: Seed, writers: People, http: aiohttp.ClientSession
) -> None:
    p, owner = seed.project_p, writers.owner.token
    db_v1, api_v1, db_v2 = value_of("db1"), value_of("api1", 4096), value_of("db2")
    assert (await put_secret(http, shell, p, "DB_PASSWORD", db_v1, token=owner, mutation="a")).status == 202
    assert (await put_secret(http, shell, p, "API_KEY", api_v1, token=owner, mutation="b")).status == 202
    run = secret_run(database.dsn(), p)
    async with WorkerClient(shell, seed.worker_b, pki.client_context(pki.worker_b)) as worker:
        offered, starting = await started(worker, run)
        assert starting.json()["status"] == "applied"
        assert delivered(starting) == {"API_KEY": (1, api_v1), "DB_PASSWORD": (1, db_v1)}
        assert [s["name"] for s in starting.json()["secrets"]] == ["API_KEY", "DB_PASSWORD"]  # by name
        # A fenced call (another lease token) is an error body: nothing delivered.
        forged = Offered(offered.offer, "A" * 43)
        fenced = await worker.activate(forged, "starting")
        assert (fenced.status, fenced.code) == (409, "fenced.token_mismatch"), fenced
        assert b64(db_v1).encode() not in fenced.body and b64(api_v1).encode() not in fenced.body
        # A newer version set meanwhile changes nothing for this Attempt: its replays deliver what it received.
        newer = await put_secret(http, shell, p, "DB_PASSWORD", db_v2, token=owner, mutation="c")
        assert newer.json()["version"] == 2, newer
        replay = await worker.activate(offered, "starting")
        assert replay.json()["status"] == "already_starting"
        assert delivered(replay) == {"API_KEY": (1, api_v1), "DB_PASSWORD": (1, db_v1)}
        running = await worker.activate(offered, "running")
        assert running.status == 200 and "secrets" not in running.json(), running  # only a starting ACK delivers
        late = await worker.activate(offered, "starting")
        assert late.json()["status"] == "already_running"
        assert delivered(late) == {"API_KEY": (1, api_v1), "DB_PASSWORD": (1, db_v1)}
    # Version 1 is kept sealed while the Attempt lives (a replay needs it); version 2 is the current one.
    rows = {(r.name, r.version): r for r in version_rows(database.dsn())}
    assert shell.sealer is not None and opened(shell.sealer, rows[("DB_PASSWORD", 1)]) == db_v1


async def test_an_answer_without_secrets_is_the_answer_it_always_was(pki: Pki, shell: Shell, seed: Seed) -> None:
    """A plan naming no secret (the seeded Runs): every activation answer is the canonical snapshot answer, with no
    `secrets` key at all, as old Workers expect."""
    async with WorkerClient(shell, seed.worker_a, pki.client_context(pki.worker_a)) as worker:
        offered, starting = await started(worker, seed.runs_p[0])
        for reply in (starting, await worker.activate(offered, "starting"), await worker.activate(offered, "running")):
            assert reply.status == 200 and "secrets" not in reply.json(), reply
            assert (
                reply.body
                == ActivationResponse.from_result({k: v for k, v in reply.json().items() if k != "schema"}).to_json()
            )


# -- rotation of the key-encryption key ------------------------------------------------------------------------------


async def test_a_rotation_rewraps_every_version_then_the_old_key_can_go(
    database: PgDatabase, pki: Pki, seed: Seed
) -> None:
    writers = add_writers(database.dsn(), seed.project_p)
    kek_a, kek_b, kek_c = os.urandom(32), os.urandom(32), os.urandom(32)
    values: dict[str, bytes] = {}
    run = secret_run(database.dsn(), seed.project_p)
    async with serve_shell(Database(database.runtime_dsn), pki, sealer=Sealer(kek_a)) as old, user_http(pki) as http:
        for n, name in enumerate(("API_KEY", "DB_PASSWORD", "S1", "S2", "S3", "S4", "S5")):
            values[name] = value_of(name, 40 + n)
            reply = await put_secret(http, old, seed.project_p, name, values[name], token=writers.owner.token,
                                     mutation=f"m-{name}")  # fmt: skip
            assert reply.status == 202, reply
    async with serve_shell(Database(database.runtime_dsn), pki, sealer=Sealer(kek_c)) as stray, user_http(pki) as http:
        # One version under a key the rotating shells never hold.
        reply = await put_secret(http, stray, seed.project_p, "STRAY", b"x", token=writers.owner.token, mutation="x")
        assert reply.status == 202, reply
    assert {r.kek_id for r in version_rows(database.dsn())} == {kek_id(kek_a), kek_id(kek_c)}

    rotating = Sealer(kek_b, [kek_a])
    db = Database(database.runtime_dsn)
    await db.open()
    try:
        counts = await rewrap_pass(db, rotating, page_size=2)  # pages of 2: the stray version holds none up
        assert (counts.rewrapped, counts.unchanged, counts.unknown_kek, counts.tampered) == (7, 0, 1, 0)
        assert counts.missing_kek_ids == {kek_id(kek_c)}
        again = await rewrap_pass(db, rotating)
        assert (again.rewrapped, again.skipped) == (0, 1)  # nothing left to move but the stray one
        # Another shell of the old key finding nothing to move from its point of view, and a racing shell's
        # compare-and-set: covered by pgTAP (db/test/ql_api/secrets.sql).
    finally:
        await db.close()
    rows = version_rows(database.dsn())
    assert {r.name: r.kek_id for r in rows} == {**dict.fromkeys(values, kek_id(kek_b)), "STRAY": kek_id(kek_c)}
    new_only = Sealer(kek_b)
    for row in rows:
        if row.name != "STRAY":
            assert opened(new_only, row) == values[row.name]

    # With the old key dropped, delivery opens the rewrapped values.
    async with (
        serve_shell(Database(database.runtime_dsn), pki, sealer=new_only) as new,
        WorkerClient(new, seed.worker_b, pki.client_context(pki.worker_b)) as worker,
    ):
        _, starting = await started(worker, run)
        assert delivered(starting) == {"API_KEY": (1, values["API_KEY"]), "DB_PASSWORD": (1, values["DB_PASSWORD"])}
        stray_run = secret_run(database.dsn(), seed.project_p, {**SECRET_PLAN, "secretEnv": {"X": "STRAY"}})
        offered = await worker.pull()
        assert offered.offer["runId"] == stray_run
        unknown = await worker.activate(offered, "starting")
        assert (unknown.status, unknown.code) == (503, "secrets.unknown_kek"), unknown


async def test_a_value_that_was_moved_or_altered_is_never_delivered(
    database: PgDatabase, pki: Pki, shell: Shell, seed: Seed, writers: People, http: aiohttp.ClientSession,
    logs: Logs,
) -> None:  # fmt: skip
    values = {"DB_PASSWORD": b"db-value", "API_KEY": b"apivalue"}  # of one size: a swap fits the columns
    for name, value in values.items():
        reply = await put_secret(http, shell, seed.project_p, name, value, token=writers.owner.token, mutation=name)
        assert reply.status == 202, reply
    with psycopg.connect(database.dsn(), autocommit=True) as conn:  # a DBA swaps the two ciphertexts
        conn.execute(
            "update ql.secret_versions v set ciphertext = o.ciphertext, nonce = o.nonce, wrapped_key = o.wrapped_key"
            " from ql.secret_versions o where v.id <> o.id and v.size = o.size"
        )
    run = secret_run(database.dsn(), seed.project_p, {**SECRET_PLAN, "secretFiles": {"f": "API_KEY"}})
    async with WorkerClient(shell, seed.worker_b, pki.client_context(pki.worker_b)) as worker:
        _, starting = await started(worker, run)
    assert (starting.status, starting.code) == (500, "secrets.tampered"), starting
    assert not any(v in starting.body or b64(v).encode() in starting.body for v in values.values())
    (line,) = [json.loads(line) for line in logs.shell.lines if "secret_refused" in line]
    assert line["code"] == "secrets.tampered" and uuid.UUID(line["version_id"])
    assert set(line) <= {"time", "level", "component", "event", "route", "request_id", "code", "version_id"}


# -- logs ------------------------------------------------------------------------------------------------------------


def _encodings(value: bytes) -> dict[str, str]:
    """A value's bytes as text (when they are), hex (PostgreSQL's bytea output) and base64 in its variants."""
    found = {
        "hex": value.hex(),
        "base64": b64(value),
        "base64 unpadded": b64(value).rstrip("="),
        "base64url": base64.urlsafe_b64encode(value).decode().rstrip("="),
        "base64 of a middle slice": b64(value[3:27]),  # the same bytes at another alignment
    }
    if value.isascii():
        found["text"] = value.decode()
    return found


async def test_no_secret_value_reaches_a_log(
    pki: Pki, private_cluster: PrivateCluster, private_database: PgDatabase, logs: Logs
) -> None:
    """After a set, a replay, a list, a delivery to a Worker and its replay, and a delete, against a cluster that
    logs every statement with its bind parameters: neither PostgreSQL's log nor any log record of the process
    holds a value in any encoding."""
    cluster = private_cluster.cluster
    log_offset = cluster.log_file.stat().st_size
    seed = seed_database(private_database.dsn(), pki)
    writers = add_writers(private_database.dsn(), seed.project_p)
    text_value = ("hunter2-" + uuid.uuid4().hex).encode()  # printable, as most passwords are
    binary_value = value_of("binary", 512)
    run = secret_run(private_database.dsn(), seed.project_p)
    async with (
        serve_shell(Database(private_database.runtime_dsn), pki, sealer=Sealer(os.urandom(32))) as shell,
        user_http(pki) as http,
        WorkerClient(shell, seed.worker_b, pki.client_context(pki.worker_b)) as worker,
    ):
        p, owner = seed.project_p, writers.owner.token
        for name, value in (("DB_PASSWORD", text_value), ("API_KEY", binary_value)):
            assert (await put_secret(http, shell, p, name, value, token=owner, mutation=name)).status == 202
            assert (await put_secret(http, shell, p, name, value, token=owner, mutation=name)).status == 200
        assert (await list_secrets(http, shell, p, token=seed.viewer.token)).status == 200
        offered, starting = await started(worker, run)
        assert delivered(starting) == {"API_KEY": (1, binary_value), "DB_PASSWORD": (1, text_value)}
        assert delivered(await worker.activate(offered, "starting")) == delivered(starting)
        bad = await put_secret(http, shell, p, "db_password", text_value, token=owner, mutation="bad")
        assert bad.status == 400
        assert (await delete_secret(http, shell, p, "DB_PASSWORD", token=owner, mutation="del")).status == 202

    pg_log = cluster.log_file.read_bytes()[log_offset:].decode("utf-8", "replace")
    # The log is live: the set's statement and its bind parameters (the ciphertext among them) are there.
    assert "ql_api.secret_set_v1" in pg_log and "parameters: $1 = " in pg_log.lower()
    assert "ql_api.attempt_activation_v2" in pg_log
    secrets = {f"{name} ({kind})": text for name, value in (("text value", text_value), ("binary value", binary_value))
               for kind, text in _encodings(value).items()}  # fmt: skip
    events = [json.loads(line) for line in logs.shell.lines]
    assert any(e["event"] == "request" and e["route"] == "user.secrets.set" for e in events), logs.shell.lines
    for where, text in (("PostgreSQL's log", pg_log), ("the shell's log", logs.shell.text),
                        ("every log record", logs.everything.text)):  # fmt: skip
        lowered = text.lower()
        leaks = [name for name, secret in secrets.items() if secret in text or secret.lower() in lowered]
        assert leaks == [], where


# -- a real `qinglong shell serve` process: the key rotates on SIGHUP ------------------------------------------------


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


async def poll(predicate: Any, *, within: float) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, f"condition not met within {within} s"
        await asyncio.sleep(0.05)


def _kek_file(path: Path) -> Path:
    path.write_text(new_kek())
    path.chmod(0o600)
    return path


def _shell_toml(folder: Path, pki: Pki, dsn: str, ports: tuple[int, int, int], secrets: str) -> Path:
    cluster = folder / "cluster.secret"
    if not cluster.exists():
        cluster.write_bytes(os.urandom(32).hex().encode())
        cluster.chmod(0o600)
    config = folder / "shell.toml"
    config.write_text(
        f'[database]\ndsn = "{dsn}"\n\n[secret]\ncluster_secret_file = "cluster.secret"\n\n{secrets}\n\n'
        f'[worker_listener]\nhost = "127.0.0.1"\nport = {ports[0]}\ncertificate = "{pki.server.certificate}"\n'
        f'key = "{pki.server.key}"\nclient_ca = "{pki.ca}"\n\n'
        f'[user_listener]\nhost = "127.0.0.1"\nport = {ports[1]}\ncertificate = "{pki.server.certificate}"\n'
        f'key = "{pki.server.key}"\n\n[admin_listener]\nhost = "127.0.0.1"\nport = {ports[2]}\n'
    )
    return config


def _events(log: Path, event: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("event") == event]


async def test_a_running_shell_reloads_its_key_and_rewraps_every_version(
    tmp_path: Path, database: PgDatabase, pki: Pki, seed: Seed
) -> None:
    """shell.toml's [secrets] read by `qinglong shell serve`: a set seals under kek_file; SIGHUP with a new kek_file
    and the old one accepted rewraps every version (counted in the log and the metrics, no key material in either);
    SIGHUP with the old key dropped still delivers; a kek file others can read fails the reload, changing nothing."""
    writers = add_writers(database.dsn(), seed.project_p)
    ports = (free_port(), free_port(), free_port())
    old, new = _kek_file(tmp_path / "old.kek"), _kek_file(tmp_path / "new.kek")
    config = _shell_toml(tmp_path, pki, database.runtime_dsn, ports, '[secrets]\nkek_file = "old.kek"')
    log = tmp_path / "shell.log"
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(*SERVE, str(config), stderr=out)
    shell = Shell(f"https://127.0.0.1:{ports[0]}", f"https://127.0.0.1:{ports[1]}", f"http://127.0.0.1:{ports[2]}",
                  Database(database.runtime_dsn), b"", ports[0], ports[1])  # fmt: skip
    values = {"API_KEY": value_of("api"), "DB_PASSWORD": value_of("db"), "THIRD": value_of("third")}

    def reloads() -> list[dict[str, Any]]:
        lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
        return [line for line in lines if line["event"] in ("shell.reloaded", "shell.reload_failed")]

    async def reload(secrets: str) -> dict[str, Any]:
        before = len(reloads())
        _shell_toml(tmp_path, pki, database.runtime_dsn, ports, secrets)
        proc.send_signal(signal.SIGHUP)
        await poll(lambda: len(reloads()) > before, within=10)
        return reloads()[-1]

    async def metric(name: str) -> float | None:
        async with aiohttp.ClientSession() as admin, admin.get(shell.admin_url + "/metrics") as resp:
            found = re.search(rf"^{re.escape(name)} (\S+)$", await resp.text(), re.M)
        return None if found is None else float(found[1])

    try:
        await poll(lambda: _listening(ports[2]), within=20)
        await poll(lambda: bool(_events(log, "secrets.rewrapped")), within=10)  # the pass at start: nothing to do
        assert _events(log, "secrets.rewrapped")[0]["rewrapped"] == 0
        async with user_http(pki) as http:
            for name, value in values.items():
                made = await put_secret(http, shell, seed.project_p, name, value, token=writers.owner.token,
                                        mutation=name)  # fmt: skip
                assert made.status == 202, made
        assert {r.kek_id for r in version_rows(database.dsn())} == {kek_id(read_kek(old))}

        reloaded = await reload('[secrets]\nkek_file = "new.kek"\naccepted_kek_files = ["old.kek"]')
        assert (reloaded["event"], reloaded["kek_id"], reloaded["accepted_kek_ids"]) == (
            "shell.reloaded", kek_id(read_kek(new)), kek_id(read_kek(old))
        )  # fmt: skip
        await poll(lambda: len(_events(log, "secrets.rewrapped")) == 2, within=10)
        rewrapped = _events(log, "secrets.rewrapped")[-1]
        assert (rewrapped["kek_id"], rewrapped["rewrapped"], rewrapped["skipped_unknown_kek"]) == (
            kek_id(read_kek(new)), 3, 0
        )  # fmt: skip
        assert {r.kek_id for r in version_rows(database.dsn())} == {kek_id(read_kek(new))}
        assert await metric('qinglong_shell_secret_rewraps_total{outcome="rewrapped"}') == 3
        assert await metric("qinglong_shell_secret_versions_not_current") == 0

        (tmp_path / "leaky.kek").write_text(new_kek())
        (tmp_path / "leaky.kek").chmod(0o640)
        failed = await reload('[secrets]\nkek_file = "leaky.kek"\naccepted_kek_files = ["new.kek"]')
        assert failed["event"] == "shell.reload_failed" and "chmod 600" in failed["reason"], failed

        dropped = await reload('[secrets]\nkek_file = "new.kek"')
        assert dropped["event"] == "shell.reloaded" and dropped["accepted_kek_ids"] is None, dropped
        run = secret_run(database.dsn(), seed.project_p)
        async with WorkerClient(shell, seed.worker_b, pki.client_context(pki.worker_b)) as worker:
            _, starting = await started(worker, run)
        assert delivered(starting) == {"API_KEY": (1, values["API_KEY"]), "DB_PASSWORD": (1, values["DB_PASSWORD"])}
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30)
    assert proc.returncode == 0
    text = log.read_text()
    for key in (old, new):
        assert key.read_text().strip() not in text.lower()
    for value in values.values():
        assert b64(value) not in text and value.hex() not in text
