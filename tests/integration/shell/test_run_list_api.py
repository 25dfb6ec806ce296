"""The run history route of the user API, `GET /api/v3/projects/{project}/runs` (qinglong/run-list@v1), through
the real shell over TLS 1.3 with bearer tokens: pages walked by cursor are the database's order and stay put
when Runs are queued between them; filters arrive as query parameters; the viewer may read; another Project's
Runs never appear and another Project is 404; every refusal (a bad status, a bad cursor, an unknown, repeated
or out-of-range parameter, an empty time range) is a 400 with its stable code, after the audited admission,
and writes nothing else. Touches: a fresh database, the in-process shell on loopback.
"""

from __future__ import annotations

import urllib.parse
import uuid
from typing import Any

import psycopg
import pytest

from qinglong.wire import RunList
from tests.conftest import Database as PgDatabase
from tests.integration.db.factories import make_revision, make_runs
from tests.integration.shell.conftest import (
    PLAN,
    Pki,
    Seed,
    Shell,
    audit_rows,
    image_diff,
    ql_image,
    user_call,
    user_http,
)

pytestmark = pytest.mark.db

ENQUEUE = "qinglong/run-enqueue@v1"


def _path(project: str, **params: Any) -> str:
    query = urllib.parse.urlencode(params)
    return f"/api/v3/projects/{project}/runs" + (f"?{query}" if query else "")


def _ordered(dsn: str, project: str, where: str = "true", args: tuple[Any, ...] = ()) -> list[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            f"select id::text from ql.runs where project_id = %s and {where} order by created_at_ms desc, id desc",  # noqa: S608 - test constants
            (project, *args),
        ).fetchall()
    return [r[0] for r in rows]


@pytest.fixture
def more_runs(database: PgDatabase, seed: Seed) -> str:
    """Seven more queued Runs in P, of a second task; returns that task's id."""
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        revision = make_revision(conn, uuid.UUID(seed.project_p), PLAN)
        make_runs(conn, revision, 7)
        row = conn.execute(
            "select task_id::text from ql.task_execution_revisions where id = %s", (revision,)
        ).fetchone()
    assert row is not None
    return str(row[0])


async def test_pages_walked_by_cursor_are_the_order_and_stay_put(
    pki: Pki, shell: Shell, seed: Seed, database: PgDatabase, more_runs: str
) -> None:
    expected = _ordered(database.dsn(), seed.project_p)
    assert len(expected) == 10
    async with user_http(pki) as http:
        first = await user_call(http, shell, "GET", _path(seed.project_p, limit=4), token=seed.operator.token)
        assert first.status == 200, first
        page = RunList.parse(first.body)
        assert [r.run_id for r in page.runs] == expected[:4] and page.next_cursor is not None
        # Two Runs queued between pages (through the API, as a user would) do not move the next pages.
        for n in range(2):
            queued = await user_call(
                http, shell, "POST", _path(seed.project_p), token=seed.operator.token,
                body={"schema": ENQUEUE, "mutationId": f"between-pages-{n}", "taskId": seed.task_p},
            )  # fmt: skip
            assert queued.status == 202, queued
        walked = [r.run_id for r in page.runs]
        cursor: str | None = page.next_cursor
        while cursor is not None:
            reply = await user_call(
                http, shell, "GET", _path(seed.project_p, limit=4, cursor=cursor), token=seed.operator.token
            )
            assert reply.status == 200, reply
            page = RunList.parse(reply.body)
            walked += [r.run_id for r in page.runs]
            cursor = page.next_cursor
        assert walked == expected, "nothing skipped, nothing twice, and the new Runs are not in the old walk"
        again = await user_call(http, shell, "GET", _path(seed.project_p, limit=100), token=seed.viewer.token)
    assert again.status == 200, again
    fresh = [r.run_id for r in RunList.parse(again.body).runs]
    assert fresh[2:] == expected and fresh == _ordered(database.dsn(), seed.project_p), "a new walk shows them first"
    assert not set(fresh) & {*seed.runs_q}, "another Project's Run never appears"
    reads = await audit_rows(database.dsn(), "user.runs.list")
    assert [(r["decision"], r["permission"]) for r in reads] == [("allow", "run.read")] * 4


async def test_filters_arrive_as_query_parameters(
    pki: Pki, shell: Shell, seed: Seed, database: PgDatabase, more_runs: str
) -> None:
    dsn = database.dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(  # one second apart, in the order they were made, so a time splits them
            "update ql.runs r set created_at_ms = r.created_at_ms + 1000 * x.n from (select id, row_number() over"
            " (order by created_at_ms, id) n from ql.runs where project_id = %s) x where r.id = x.id",
            (seed.project_p,),
        )
        conn.execute(
            "update ql.runs set status = 'failed', ended_at_ms = created_at_ms + 1 where id = any(%s::uuid[])",
            ([seed.runs_p[0], seed.runs_p[2]],),
        )
        found = conn.execute(
            "select r.created_at_ms, t.name from ql.runs r join ql.tasks t on t.id = %s"
            " where r.project_id = %s order by r.created_at_ms, r.id offset 2 limit 1",
            (seed.task_p, seed.project_p),
        ).fetchone()
    assert found is not None
    middle, task_name = found
    async with user_http(pki) as http:

        async def listed(**params: Any) -> list[str]:
            reply = await user_call(http, shell, "GET", _path(seed.project_p, **params), token=seed.operator.token)
            assert reply.status == 200, reply
            return [r.run_id for r in RunList.parse(reply.body).runs]

        assert await listed(taskId=more_runs) == _ordered(dsn, seed.project_p, "task_id = %s", (more_runs,))
        assert await listed(status="failed") == _ordered(dsn, seed.project_p, "status = 'failed'")
        assert len(await listed(status="failed")) == 2
        assert await listed(taskId=seed.task_p, status="queued") == [seed.runs_p[1]]
        assert await listed(sinceMs=middle) == _ordered(dsn, seed.project_p, "created_at_ms >= %s", (middle,))
        assert await listed(untilMs=middle) == _ordered(dsn, seed.project_p, "created_at_ms < %s", (middle,))
        assert 0 < len(await listed(untilMs=middle)) < 10, "the range splits the Runs"
        assert await listed(taskId=seed.task_q) == [], "another Project's task lists nothing here"
        reply = await user_call(http, shell, "GET", _path(seed.project_p, status="failed"), token=seed.operator.token)
    row = next(r for r in reply.json()["runs"] if r["runId"] == seed.runs_p[0])
    assert row == {
        "runId": seed.runs_p[0], "taskId": seed.task_p, "taskName": task_name, "status": "failed",
        "attemptCount": 0, "createdAtMs": row["createdAtMs"], "startedAtMs": None, "endedAtMs": row["createdAtMs"] + 1,
        "exitCode": None, "cancelReason": None,
    }  # fmt: skip
    assert reply.json()["schema"] == "qinglong/run-list@v1" and reply.json()["nextCursor"] is None


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"status": "finished"}, "wire.bad_enum"),
        ({"cursor": "not-a-cursor"}, "wire.too_short"),
        ({"cursor": "!" * 32}, "wire.bad_pattern"),
        ({"cursor": "_" * 32}, "invalid.cursor"),  # well-formed, but names a negative time: not one the API made
        ({"page": "2"}, "wire.unknown_field"),
        ("status=queued&status=failed", "wire.duplicate_key"),
        ({"limit": "101"}, "wire.out_of_range"),
        ({"limit": "ten"}, "wire.bad_type"),
        ({"taskId": "ABC"}, "wire.bad_uuid"),
        ({"sinceMs": "5", "untilMs": "5"}, "invalid.time_range"),
    ],
)
async def test_a_bad_query_is_400_with_a_stable_code_and_changes_nothing(
    params: dict[str, str] | str, code: str, pki: Pki, shell: Shell, seed: Seed, database: PgDatabase
) -> None:
    path = _path(seed.project_p) + "?" + (params if isinstance(params, str) else urllib.parse.urlencode(params))
    before = await ql_image(database.dsn())
    async with user_http(pki) as http:
        reply = await user_call(http, shell, "GET", path, token=seed.operator.token)
    assert (reply.status, reply.code) == (400, code), reply
    assert reply.json()["schema"] == "qinglong/error@v1"
    assert image_diff(before, await ql_image(database.dsn())) == {"security_audit": 1}, "only the admission's audit row"
    (row,) = await audit_rows(database.dsn(), "user.runs.list")
    assert (row["decision"], row["permission"]) == ("allow", "run.read")


async def test_who_may_list_and_which_project(pki: Pki, shell: Shell, seed: Seed, database: PgDatabase) -> None:
    before = await ql_image(database.dsn())
    async with user_http(pki) as http:
        viewer = await user_call(http, shell, "GET", _path(seed.project_p), token=seed.viewer.token)
        agent = await user_call(http, shell, "GET", _path(seed.project_p), token=seed.agent.token)
        other = await user_call(http, shell, "GET", _path(seed.project_q), token=seed.operator.token)
        stranger = await user_call(http, shell, "GET", _path(seed.project_p, status="nope"), token="x" * 43)
        nobody = await user_call(http, shell, "GET", _path(seed.project_p), token=None)
    assert viewer.status == 200 and agent.status == 200, (viewer, agent)
    assert sorted(r.run_id for r in RunList.parse(viewer.body).runs) == sorted(seed.runs_p)
    assert (other.status, other.code) == (404, "not_found"), "a Project without a binding is as missing as none"
    assert seed.runs_q[0] not in other.body.decode()
    assert (stranger.status, stranger.code) == (401, "auth.unauthenticated"), "admission comes before the query"
    assert (nobody.status, nobody.code) == (401, "auth.unauthenticated")
    changed = image_diff(before, await ql_image(database.dsn()))
    assert set(changed) <= {"security_audit"}, changed
