"""The user routes the web console reads besides the run and task routes, and the console's files, through the real
shell over TLS 1.3 with bearer tokens: `GET /api/v3/projects/{project}` (qinglong/project-view@v1) answers each
subject's role and exactly the decisions admission takes; `GET …/{project}/workers` lists only the Workers of the
pools the Project's tasks use, without ids; both are admitted and audited like every user route, and a Project
without a binding is the same 404 as one that does not exist. The console's files are on the user listener only.
Touches: a fresh database, the in-process shell on loopback.
"""

from __future__ import annotations

import json

import aiohttp
import psycopg
import pytest

from qinglong.shell.console import CSP
from qinglong.wire import ProjectView, ProjectWorkers
from tests.conftest import Database as PgDatabase
from tests.integration.shell.conftest import Pki, Seed, Shell, audit_rows, image_diff, ql_image, user_call, user_http

pytestmark = pytest.mark.db


async def test_the_project_view_answers_what_each_role_may_do(
    pki: Pki, shell: Shell, seed: Seed, database: PgDatabase
) -> None:
    before = await ql_image(database.dsn())
    seen = {}
    async with user_http(pki) as http:
        for who, subject in (("operator", seed.operator), ("viewer", seed.viewer), ("agent", seed.agent)):
            reply = await user_call(http, shell, "GET", "/api/v3/projects/project-p", token=subject.token)
            assert reply.status == 200, reply
            seen[who] = ProjectView.parse(reply.body)
        other = await user_call(http, shell, "GET", "/api/v3/projects/project-q", token=seed.viewer.token)
        nowhere = await user_call(http, shell, "GET", "/api/v3/projects/no-such", token=seed.viewer.token)
        anonymous = await user_call(http, shell, "GET", "/api/v3/projects/project-p", token=None)
    decisions = {who: (v.role, v.subject_kind, v.run_read, v.run_start, v.run_stop) for who, v in seen.items()}
    assert decisions == {
        "operator": ("operator", "user", "allow", "allow", "allow"),
        "viewer": ("viewer", "user", "allow", "deny", "deny"),
        "agent": ("operator", "agent", "allow", "allow", "approval_required"),
    }
    assert {(v.project_id, v.project, v.project_status) for v in seen.values()} == {
        (seed.project_p, "project-p", "active")
    }
    assert other.status == nowhere.status == 404 and other.json()["code"] == nowhere.json()["code"] == "not_found"
    assert anonymous.status == 401
    # admitted and audited as run.read; nothing else changed
    audits = await audit_rows(database.dsn(), "user.project.read")
    assert [(a["project_id"], a["decision"]) for a in audits if a["decision"] == "allow"] == [
        (seed.project_p, "allow")
    ] * 3
    assert {
        t for t in image_diff(before, await ql_image(database.dsn())) if not t.startswith("security_audit")
    } == set()


async def test_the_workers_of_the_project_s_pools_without_their_ids(
    pki: Pki, shell: Shell, seed: Seed, database: PgDatabase
) -> None:
    with psycopg.connect(database.dsn(), autocommit=True) as conn:  # a Worker of a pool no task of P uses
        conn.execute(
            "insert into ql.workers (name, pool, cert_fingerprint) values ('elsewhere', 'other', sha256('x'::bytea))"
        )
    async with user_http(pki) as http:
        reply = await user_call(http, shell, "GET", "/api/v3/projects/project-p/workers", token=seed.viewer.token)
        assert reply.status == 200, reply
        listed = ProjectWorkers.parse(reply.body)
        other = await user_call(http, shell, "GET", "/api/v3/projects/project-q/workers", token=seed.viewer.token)
    assert [(w.name, w.pool, w.online, w.last_contact_at_ms) for w in listed.workers] == [
        ("worker-a", "default", False, None),
        ("worker-b", "default", False, None),
    ]
    assert "workerId" not in reply.body.decode() and seed.worker_a not in reply.body.decode()
    assert other.status == 404
    audits = await audit_rows(database.dsn(), "user.workers.list")
    assert [(a["project_id"], a["decision"]) for a in audits] == [(seed.project_p, "allow"), (seed.project_q, "deny")]


async def test_the_console_is_served_on_the_user_listener_only(pki: Pki, shell: Shell) -> None:
    async with user_http(pki) as http, http.get(shell.user_url + "/console/") as page:
        assert page.status == 200 and page.headers["Content-Security-Policy"] == CSP
        assert page.headers["X-Frame-Options"] == "DENY" and page.headers["Cache-Control"] == "no-store"
        assert b'<script type="module" src="console.js">' in await page.read()
    ctx = pki.client_context(pki.worker_a)
    connector = aiohttp.TCPConnector(ssl=ctx)
    async with aiohttp.ClientSession(connector=connector) as http, http.get(shell.worker_url + "/console/") as missing:
        assert missing.status == 404 and json.loads(await missing.read())["code"] == "request.unknown_path"
        assert "Content-Security-Policy" not in missing.headers
