"""Projects by name in the user API's paths (`/api/v3/projects/{project}/…`, request_admission_v2) and the task
list route (`GET …/{project}/tasks`, qinglong/task-list@v1), through the real shell over TLS 1.3 with bearer
tokens: a name admits exactly as the id does and the function gets the admitted id, never the text of the path;
an unknown name is the same 404 as a project the subject has no binding on; a path that is neither an id nor a
name is a 400 before any SQL and writes nothing. Touches: a fresh database, the in-process shell on loopback.
"""

from __future__ import annotations

import psycopg
import pytest

from qinglong.wire import RunList, TaskList
from tests.conftest import Database as PgDatabase
from tests.integration.shell.conftest import Pki, Seed, Shell, audit_rows, image_diff, ql_image, user_call, user_http

pytestmark = pytest.mark.db


def _names(dsn: str, seed: Seed) -> dict[str, str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("select t.name, t.id::text from ql.tasks t where t.project_id = %s", (seed.project_p,))
        return {str(name): str(task) for name, task in rows.fetchall()}


async def test_a_project_by_name_reads_and_queues_as_by_id(
    pki: Pki, shell: Shell, seed: Seed, database: PgDatabase
) -> None:
    async with user_http(pki) as http:
        by_name = await user_call(http, shell, "GET", "/api/v3/projects/project-p/runs", token=seed.viewer.token)
        by_id = await user_call(http, shell, "GET", f"/api/v3/projects/{seed.project_p}/runs", token=seed.viewer.token)
        assert by_name.status == by_id.status == 200, (by_name, by_id)
        assert RunList.parse(by_name.body) == RunList.parse(by_id.body)
        queued = await user_call(
            http, shell, "POST", "/api/v3/projects/project-p/runs", token=seed.operator.token,
            body={"schema": "qinglong/run-enqueue@v1", "mutationId": "by-name-1", "taskId": seed.task_p},
        )  # fmt: skip
        assert queued.status == 202, queued
    with psycopg.connect(database.dsn()) as conn:
        row = conn.execute("select project_id::text from ql.runs where id = %s", (queued.json()["runId"],)).fetchone()
    assert row == (seed.project_p,)
    audits = await audit_rows(database.dsn(), "user.runs.list")
    assert [a["project_id"] for a in audits] == [seed.project_p, seed.project_p]  # the id, whichever way named


async def test_the_task_list_names_every_task_of_the_admitted_project(
    pki: Pki, shell: Shell, seed: Seed, database: PgDatabase
) -> None:
    async with user_http(pki) as http:
        reply = await user_call(http, shell, "GET", "/api/v3/projects/project-p/tasks", token=seed.viewer.token)
        assert reply.status == 200, reply
        listed = TaskList.parse(reply.body)
        assert listed.project_id == seed.project_p and listed.project == "project-p"
        assert {t.name: t.task_id for t in listed.tasks} == _names(database.dsn(), seed)
        assert seed.task_p in {t.task_id for t in listed.tasks} and seed.task_q not in {t.task_id for t in listed.tasks}
        # Project Q exists, but the viewer has no binding there: the same 404 as a name that exists nowhere.
        other = await user_call(http, shell, "GET", "/api/v3/projects/project-q/tasks", token=seed.viewer.token)
        nowhere = await user_call(http, shell, "GET", "/api/v3/projects/no-such/tasks", token=seed.viewer.token)
        assert other.status == nowhere.status == 404
        assert other.json()["code"] == nowhere.json()["code"]


@pytest.mark.parametrize("project", ["-leading-dash", "a" * 129, "has%20space", "semi;colon"])
async def test_a_path_that_is_neither_id_nor_name_is_refused_before_sql(
    pki: Pki, shell: Shell, seed: Seed, database: PgDatabase, project: str
) -> None:
    before = await ql_image(database.dsn())
    async with user_http(pki) as http:
        reply = await user_call(http, shell, "GET", f"/api/v3/projects/{project}/tasks", token=seed.viewer.token)
    assert reply.status == 400, reply
    assert reply.json()["code"] == "wire.bad_pattern"
    assert image_diff(before, await ql_image(database.dsn())) == {}  # not even an audit row
