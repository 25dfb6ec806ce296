"""GET /api/v3/projects, the one user route that names no Project, through the in-process shell over TLS: a bearer
is admitted as a subject alone (subject_admission_v1) and audited without a Project; the answer lists exactly the
Projects the subject may read and, by `runIdPrefix`, their Runs whose id starts with it; no bearer, an unknown one
or a disabled subject is 401 with no audit row; a malformed prefix is refused before the function is called.
Touches: the session cluster's per-test database, the in-process shell on loopback.
"""

from __future__ import annotations

import psycopg
import pytest

from tests.conftest import Database
from tests.integration.shell import conftest as shell_conftest
from tests.integration.shell.conftest import Pki, Seed, Shell, audit_rows, user_call, user_http

pki = shell_conftest.pki
seed = shell_conftest.seed
shell = shell_conftest.shell

pytestmark = pytest.mark.db
ROUTE = "user.projects.list"


async def test_a_subject_lists_the_projects_it_may_read_and_finds_a_run_by_a_prefix(
    shell: Shell, seed: Seed, pki: Pki, database: Database
) -> None:
    async with user_http(pki) as http:
        listed = await user_call(http, shell, "GET", "/api/v3/projects", token=seed.viewer.token)
        assert listed.status == 200, listed
        assert listed.json() == {
            "schema": "qinglong/project-list@v1", "status": "listed", "runs": [], "moreRuns": False,
            "projects": [{"projectId": seed.project_p, "project": "project-p", "projectStatus": "active",
                          "role": "viewer"}],
        }  # fmt: skip
        run = seed.runs_p[0]
        found = await user_call(http, shell, "GET", f"/api/v3/projects?runIdPrefix={run[:8]}", token=seed.viewer.token)
        assert found.status == 200, found
        assert [(r["runId"], r["projectId"]) for r in found.json()["runs"]] == [(run, seed.project_p)]
        other = seed.runs_q[0]  # project-q: the viewer has no role there
        hidden = await user_call(
            http, shell, "GET", f"/api/v3/projects?runIdPrefix={other.replace('-', '')}", token=seed.viewer.token
        )
        assert (hidden.status, hidden.json()["runs"]) == (200, []), "another Project's Run is not found"
    assert [(a["subject_id"], a["project_id"], a["permission"], a["decision"]) for a in
            await audit_rows(database.dsn(), ROUTE)] == [(str(seed.viewer.id), None, None, "allow")] * 3  # fmt: skip


async def test_no_token_an_unknown_one_or_a_disabled_subject_is_401_and_nothing_is_audited(
    shell: Shell, seed: Seed, pki: Pki, database: Database
) -> None:
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        conn.execute("update ql.subjects set status = 'disabled' where id = %s", (seed.agent.id,))
    async with user_http(pki) as http:
        for token in (None, "an-unknown-bearer-token", seed.agent.token):
            reply = await user_call(http, shell, "GET", "/api/v3/projects", token=token)
            assert (reply.status, reply.code) == (401, "auth.unauthenticated"), (token, reply)
        bad = await user_call(http, shell, "GET", "/api/v3/projects?runIdPrefix=ABCDEF12", token=seed.viewer.token)
        assert (bad.status, bad.code) == (400, "wire.bad_pattern"), bad
    assert [a["decision"] for a in await audit_rows(database.dsn(), ROUTE)] == ["allow"], "only the admitted call"
