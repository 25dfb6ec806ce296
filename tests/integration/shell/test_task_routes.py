"""The user API's task routes through the in-process shell over TLS (docs/decisions/0024-console-actions.md): an
admin makes a task's revision (202 created, 202 revised, 200 already_made on a replay), disables and enables it, sets
and clears its schedule, and previews a schedule's fire times; an operator is refused 403 before the body is read and
nothing changes; a bad task name in the path or a bad body is a typed 400 that changes nothing.
Touches: the session cluster's per-test database, the in-process shell on loopback.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import psycopg
import pytest

from tests.conftest import Database
from tests.integration.db.factories import set_role
from tests.integration.shell import conftest as shell_conftest
from tests.integration.shell.conftest import Pki, Seed, Shell, _subject, audit_rows, ql_image, user_call, user_http

pki = shell_conftest.pki
seed = shell_conftest.seed
shell = shell_conftest.shell

pytestmark = pytest.mark.db
SCHEMA = "qinglong/task@v1"


def _admin(database: Database, seed: Seed) -> str:
    """An admin of project P: its bearer token."""
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        admin = _subject(conn, "user", "admin")
        set_role(conn, uuid.UUID(seed.project_p), admin, "admin", True)
    return admin.token


def _revision(mutation: str, argv: list[str], **more: Any) -> dict[str, Any]:
    return {"schema": SCHEMA, "mutationId": mutation, "plan": {"argv": argv, **more}}


async def test_an_admin_makes_enables_and_schedules_a_task(
    shell: Shell, seed: Seed, pki: Pki, database: Database
) -> None:
    token = _admin(database, seed)
    base = "/api/v3/projects/project-p/tasks/nightly"
    async with user_http(pki) as http:
        made = await user_call(http, shell, "PUT", base, token=token,
                               body=_revision("m-1", ["echo", "hi"], env={"A": "1"}, timeoutMs=5000))  # fmt: skip
        assert (made.status, made.json()["status"], made.json()["signed"]) == (202, "created", False), made
        again = await user_call(http, shell, "PUT", base, token=token,
                                body=_revision("m-1", ["echo", "hi"], env={"A": "1"}, timeoutMs=5000))  # fmt: skip
        assert (again.status, again.json()["status"]) == (200, "already_made"), again
        assert again.json()["revisionId"] == made.json()["revisionId"]
        revised = await user_call(http, shell, "PUT", base, token=token, body=_revision("m-2", ["echo", "bye"]))
        assert (revised.status, revised.json()["status"]) == (202, "revised"), revised
        listed = await user_call(http, shell, "GET", "/api/v3/projects/project-p/tasks", token=token)
        (task,) = [t for t in listed.json()["tasks"] if t["name"] == "nightly"]
        assert (task["plan"], task["signed"], task["revisionId"]) == (
            {"argv": ["echo", "bye"]}, False, revised.json()["revisionId"]
        )  # fmt: skip

        off = await user_call(
            http, shell, "PUT", f"{base}/status", token=token, body={"schema": SCHEMA, "active": False}
        )
        assert (off.status, off.json()["status"], off.json()["changed"]) == (200, "disabled", True), off
        on = await user_call(http, shell, "PUT", f"{base}/status", token=token, body={"schema": SCHEMA, "active": True})
        assert (on.status, on.json()["status"]) == (200, "enabled"), on

        body = {"schema": SCHEMA, "cron": "*/10 * * * * *", "timezone": "Asia/Shanghai"}
        scheduled = await user_call(http, shell, "PUT", f"{base}/schedule", token=token, body=body)
        assert (scheduled.status, scheduled.json()["status"], scheduled.json()["overlap"]) == (200, "set", "skip")
        assert scheduled.json()["nextFireAtMs"] % 10_000 == 0, scheduled
        same = await user_call(http, shell, "PUT", f"{base}/schedule", token=token, body=body)
        assert same.json()["status"] == "unchanged", same
        cleared = await user_call(http, shell, "PUT", f"{base}/schedule", token=token,
                                  body={"schema": SCHEMA, "cron": None})  # fmt: skip
        assert (cleared.status, cleared.json()["status"]) == (200, "cleared"), cleared

        previews = "/api/v3/projects/project-p/schedule-preview"
        query = "?cron=0+9+*+*+*&timezone=Asia%2FShanghai&count=3"
        preview = await user_call(http, shell, "GET", previews + query, token=seed.viewer.token)
        assert preview.status == 200, preview
        fires = preview.json()["fires"]
        assert len(fires) == 3 and all(f["local"].endswith("T09:00:00+08:00") for f in fires), fires
        assert [b["atMs"] - a["atMs"] for a, b in itertools.pairwise(fires)] == [86_400_000] * 2
        never = await user_call(http, shell, "GET", previews + "?cron=*+*+30+2+*&timezone=UTC", token=seed.viewer.token)
        assert (never.status, never.code) == (400, "invalid.cron_never_fires"), never


async def test_an_operator_is_refused_and_bad_input_changes_nothing(
    shell: Shell, seed: Seed, pki: Pki, database: Database
) -> None:
    token = _admin(database, seed)
    base = "/api/v3/projects/project-p/tasks"
    before = await ql_image(database.dsn())
    audited = len(await audit_rows(database.dsn(), "user.tasks.revise"))
    async with user_http(pki) as http:
        denied = await user_call(http, shell, "PUT", f"{base}/nightly", token=seed.operator.token,
                                 body=_revision("m-1", ["rm", "-rf", "/"]))  # fmt: skip
        assert (denied.status, denied.code) == (403, "denied"), denied
        for path, body, code in (
            (f"{base}/bad%20name", _revision("m-2", ["true"]), "wire.bad_pattern"),
            (f"{base}/nightly", _revision("m-3", []), "wire.too_short"),
            (f"{base}/nightly", {"schema": SCHEMA, "mutationId": "m-4"}, "wire.missing_field"),
            (f"{base}/nightly/status", {"schema": SCHEMA, "active": "no"}, "wire.bad_type"),
            (f"{base}/nightly/schedule", {"schema": SCHEMA, "cron": "61 * * * *", "timezone": "UTC"}, "invalid.cron"),
            (f"{base}/nightly/schedule", {"schema": SCHEMA, "cron": "* * * * *", "timezone": "Mars/Base"},
             "invalid.timezone"),
            (f"{base}/nightly/status", {"schema": SCHEMA, "active": False}, "not_found"),
        ):  # fmt: skip
            reply = await user_call(http, shell, "PUT", path, token=token, body=body)
            assert (reply.status // 100, reply.code) == (4, code), (path, body, reply)
    assert [a["reason"] for a in await audit_rows(database.dsn(), "user.tasks.revise")][audited:][0] == (
        "role.insufficient"
    )
    after = await ql_image(database.dsn())
    assert {k: v for k, v in after.items() if k != "security_audit"} == {
        k: v for k, v in before.items() if k != "security_audit"
    }, "a refusal changes nothing but the audit"
