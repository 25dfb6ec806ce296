"""Schemathesis against the running user API: its /openapi.json is loaded over TLS (trusting the test
CA), and every user operation is fuzzed stateless — positive and negative cases, with random ids and
with the seeded Project, Runs and task (and a seeded secret) — as the operator, and the secrets' writes as an
owner. No answer may be a 5xx: a 500 is a crash and a 503 here is a storage or projection fault, both failures.
Every answer must also conform to the document (declared status, media type and body schema).

Hypothesis runs in a worker thread (requests is synchronous) while the event loop serves the shell.
Touches: a fresh database, the in-process shell on loopback.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from typing import Any, Final

import psycopg
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.conftest import Database as PgDatabase
from tests.integration.db.factories import make_user, set_role
from tests.integration.shell.conftest import Pki, Seed, Shell, user_call, user_http

pytestmark = pytest.mark.db

MAX_EXAMPLES = 30
USER_PREFIX = "/api/v3/projects/"
# No 5xx; and, while at it, every answer matches the document (status, media type, body schema).
CHECKS: Final = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


SECRET_VALUE: Final = "c2VlZGVkIHNlY3JldA=="  # noqa: S105  a valid value ("seeded secret") for cases drawing one
SEEDED_CRON: Final = "*/5 * * * *"  # an expression that parses, for schedule and preview cases drawing one


def _fuzz(schema: schemathesis.BaseSchema, pki: Pki, shell: Shell, seed: Seed, owner: str) -> Counter[tuple[str, int]]:
    statuses: Counter[tuple[str, int]] = Counter()
    operations = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result
        operations.append(result.ok())
    user_operations = [op for op in operations if op.path.startswith(USER_PREFIX)]
    assert {op.label for op in user_operations} == {
        "POST /api/v3/projects/{project}/runs",
        "POST /api/v3/projects/{project}/runs/{runId}/cancellation",
        "GET /api/v3/projects/{project}/runs/{runId}",
        "GET /api/v3/projects/{project}/runs",
        "GET /api/v3/projects/{project}/runs/{runId}/output",
        "GET /api/v3/projects/{project}/tasks",
        "GET /api/v3/projects/{project}",
        "GET /api/v3/projects/{project}/workers",
        "PUT /api/v3/projects/{project}/secrets/{name}",
        "POST /api/v3/projects/{project}/secrets/{name}/deletion",
        "GET /api/v3/projects/{project}/secrets",
        "PUT /api/v3/projects/{project}/tasks/{task}",
        "PUT /api/v3/projects/{project}/tasks/{task}/status",
        "PUT /api/v3/projects/{project}/tasks/{task}/schedule",
        "GET /api/v3/projects/{project}/schedule-preview",
        "PUT /api/v3/projects/{project}/notify-rules/{rule}",
        "POST /api/v3/projects/{project}/notify-rules/{rule}/removal",
        "GET /api/v3/projects/{project}/notify-rules",
        "GET /api/v3/projects/{project}/notify-deliveries",
    }

    def seeded(case: Case[Any], use_task: bool) -> Case[Any]:
        if use_task and isinstance(case.body, dict) and "taskId" in case.body:
            case.body = {**case.body, "taskId": seed.task_p}
        if use_task and isinstance(case.body, dict) and "value" in case.body:
            case.body = {**case.body, "value": SECRET_VALUE}
        if use_task and isinstance(case.body, dict) and "cron" in case.body:  # a schedule that parses, of the task
            case.body = {**case.body, "cron": SEEDED_CRON, "timezone": "UTC"}
            case.path_parameters = {**(case.path_parameters or {}), "project": seed.project_p, "task": "seeded"}
        if use_task and isinstance(case.query, dict) and "cron" in case.query:  # a preview of a schedule that parses
            case.query = {**case.query, "cron": SEEDED_CRON, "timezone": "UTC"}
            case.path_parameters = {**(case.path_parameters or {}), "project": seed.project_p}
        if use_task and isinstance(case.body, dict) and "secretName" in case.body:  # a rule the database accepts
            case.body = {"schema": case.body.get("schema"), "events": ["run.failed"], "channel": "webhook",
                         "url": "https://hooks.example.com/h", "secretName": "HOOK_SEEDED"}  # fmt: skip
            case.path_parameters = {**(case.path_parameters or {}), "project": seed.project_p, "rule": "seeded"}
        return case

    writes = ("/secrets/", "/tasks/")  # the secrets' and the tasks' writes as an owner, the rest as the operator
    headers = {
        op.label: {"Authorization": f"Bearer {owner if any(w in op.path for w in writes) else seed.operator.token}"}
        for op in user_operations
    }
    for operation in user_operations:
        fixed: list[dict[str, Any]] = [{}, {"project": seed.project_p}, {"project": "project-p"}]
        if "{runId}" in operation.path:
            fixed += [{"project": seed.project_p, "runId": run} for run in (*seed.runs_p, *seed.runs_q)]
        if "{name}" in operation.path:
            fixed += [{"project": seed.project_p, "name": "SEEDED"}, {"project": "project-p", "name": "SEEDED"}]
        if "{task}" in operation.path:
            fixed += [{"project": seed.project_p, "task": "seeded"}, {"project": "project-p", "task": "seeded"}]
        if "{rule}" in operation.path:
            fixed += [{"project": seed.project_p, "rule": "seeded"}, {"project": "project-p", "rule": "seeded"}]
        strategies = [
            st.tuples(operation.as_strategy(mode, path_parameters=path or None), st.booleans()).map(
                lambda pair: seeded(*pair)
            )
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
            for path in fixed
        ]

        @settings(
            max_examples=MAX_EXAMPLES * 2,
            deadline=None,
            database=None,
            derandomize=True,  # the same cases every run: a coverage bar that holds or fails for a reason
            phases=(Phase.explicit, Phase.generate, Phase.shrink),
            suppress_health_check=list(HealthCheck),
        )
        @given(case=st.one_of(strategies))
        def check(case: Case[Any]) -> None:
            auth = headers[case.operation.label]
            response = case.call(base_url=shell.user_url, headers=auth, verify=str(pki.ca), timeout=10)
            statuses[(case.operation.label, response.status_code)] += 1
            assert response.status_code < 500, (response.status_code, response.text[:500])
            case.validate_response(response, checks=CHECKS, headers=auth)

        check()
    return statuses


async def test_user_api_never_answers_5xx(pki: Pki, database: PgDatabase, shell: Shell, seed: Seed) -> None:
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        owner = make_user(conn)
        set_role(conn, uuid.UUID(seed.project_p), owner, "owner", True)
    async with user_http(pki) as http:  # a secret the fixed path parameters name, for its deletion to find
        body = {"schema": "qinglong/secret@v1", "mutationId": "seeded", "value": SECRET_VALUE}
        path = f"/api/v3/projects/{seed.project_p}/secrets/SEEDED"
        assert (await user_call(http, shell, "PUT", path, token=owner.token, body=body)).status == 202
        task = {"schema": "qinglong/task@v1", "mutationId": "seeded-task", "plan": {"argv": ["true"]}}
        path = f"/api/v3/projects/{seed.project_p}/tasks/seeded"  # and a task, for its status and schedule
        assert (await user_call(http, shell, "PUT", path, token=owner.token, body=task)).status == 202
        hook = f"/api/v3/projects/{seed.project_p}/secrets/HOOK_SEEDED"  # the secret the seeded rule names
        hook_body = {**body, "mutationId": "seeded-hook"}
        assert (await user_call(http, shell, "PUT", hook, token=owner.token, body=hook_body)).status == 202
    config = schemathesis.Config()
    schema = await asyncio.to_thread(
        schemathesis.openapi.from_url, shell.user_url + "/openapi.json", config=config, verify=str(pki.ca)
    )
    statuses = await asyncio.to_thread(_fuzz, schema, pki, shell, seed, owner.token)
    # The fuzzing reached past admission: every operation saw a success and a refusal.
    by_op: dict[str, set[int]] = {}
    for (label, status), _ in statuses.items():
        by_op.setdefault(label, set()).add(status)
    assert all(any(s < 300 for s in seen) for seen in by_op.values()), statuses
    assert all(any(400 <= s < 500 for s in seen) for seen in by_op.values()), statuses
