"""The documents and probes around the pipeline: /openapi.json (served by the user API) lists every
route of shell.routes.ROUTES with its method and operation id, the admin app's /metrics counts the
requests of every route exercised, and /healthz answers 200 while the database does (its 503 is
checked with the database down in test_storage.py). Also: building the user app raises no warning.
Touches: a fresh database, the in-process shell on loopback.
"""

from __future__ import annotations

import json
import re
import warnings
from collections import Counter

import aiohttp
import pytest

from qinglong.shell.app import make_app
from qinglong.shell.db import Database
from qinglong.shell.routes import ROUTES
from tests.conftest import Database as PgDatabase
from tests.integration.shell.conftest import (
    SESSION_SCHEMA,
    Pki,
    Seed,
    Shell,
    WorkerClient,
    user_call,
    user_http,
    worker_round_trip,
)

pytestmark = pytest.mark.db

_SAMPLE = re.compile(r'^qinglong_shell_requests_total\{route="([^"]+)",status="([0-9]+)"\} ([0-9.e+]+)$', re.M)


def test_user_app_registers_no_deprecated_handler(database: PgDatabase) -> None:
    """make_app("user") must not rely on aiohttp's deprecated bare-function handlers (the project runs
    its tests with warnings as errors, and aiohttp will drop them)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_app("user", Database(database.runtime_dsn))


async def test_openapi_lists_every_route(pki: Pki, shell: Shell) -> None:
    async with user_http(pki) as http, http.get(shell.user_url + "/openapi.json") as resp:
        assert resp.status == 200 and resp.content_type == "application/json"
        document = json.loads(await resp.read())
    assert document["openapi"].startswith("3.")
    listed = {
        (path, method.upper(), op["operationId"])
        for path, item in document["paths"].items()
        for method, op in item.items()
    }
    expected = {(r.path, r.method, r.name) for r in ROUTES}
    assert listed == expected
    for route in ROUTES:
        op = document["paths"][route.path][route.method.lower()]
        assert op["summary"] == f"calls ql_api.{route.function}"
        assert ("requestBody" in op) == (route.request is not None)
        names = {p["name"] for p in op["parameters"] if p["in"] == "path"}
        assert names == set(re.findall(r"\{(\w+)", route.path))
        query = [(p["name"], p["required"]) for p in op["parameters"] if p["in"] == "query"]
        assert query == [(f.name, False) for f in (route.query.FIELDS if route.query else ())]


def _requests(text: str) -> Counter[tuple[str, str]]:
    return Counter({(route, status): float(value) for route, status, value in _SAMPLE.findall(text)})


async def test_metrics_count_every_route_and_healthz(pki: Pki, shell: Shell, seed: Seed) -> None:
    async with aiohttp.ClientSession() as admin:

        async def scrape() -> Counter[tuple[str, str]]:
            async with admin.get(shell.admin_url + "/metrics") as resp:
                assert resp.status == 200 and resp.content_type == "text/plain"
                text = await resp.text()
            assert re.search(r"^# TYPE qinglong_shell_requests(_total)? counter$", text, re.M), text
            return _requests(text)

        before = await scrape()
        async with WorkerClient(shell, seed.worker_a, pki.client_context(pki.worker_a)) as worker:
            trip = await worker_round_trip(worker, renewals=2)
            assert (await worker.post("/heartbeat", {"schema": SESSION_SCHEMA, "workerGeneration": 1})).status == 200
            terminal = await worker.post("/lease-control", trip.offered.lease_control())
            assert terminal.status == 200 and terminal.json()["status"] == "terminal", terminal
            late = {"schema": "qinglong/run-output@v1", **trip.offered.fence(), "stream": "stdout", "offset": 0,
                    "dataBase64": "aGk="}  # fmt: skip
            ended = await worker.post(f"/offers/{trip.offered.offer_id}/output", late)
            assert (ended.status, ended.code) == (409, "fenced.state_drift"), ended
            fetch = {"schema": "qinglong/bundle-fetch@v1", **trip.offered.fence(), "digest": "0" * 64, "index": 0}
            late_fetch = await worker.post(f"/offers/{trip.offered.offer_id}/bundle-chunks", fetch)
            assert (late_fetch.status, late_fetch.code) == (409, "fenced.state_drift"), late_fetch
            lost = {"schema": "qinglong/run-output@v1", **trip.offered.fence(), "stream": "stdout", "writtenBytes": 2}
            recorded = await worker.post(f"/offers/{trip.offered.offer_id}/output:lost", lost)
            assert recorded.status == 200 and recorded.json()["status"] == "recorded", recorded
            fenced = await worker.post("/heartbeat", {"schema": SESSION_SCHEMA, "workerGeneration": 2})
            assert (fenced.status, fenced.code) == (409, "fenced.stale_generation"), fenced
        async with user_http(pki) as http:
            base = f"/api/v3/projects/{seed.project_p}/runs"
            token = seed.operator.token
            enqueue = {"schema": "qinglong/run-enqueue@v1", "taskId": seed.task_p, "mutationId": "m"}
            assert (await user_call(http, shell, "POST", base, token=token, body=enqueue)).status == 202
            cancel = {"schema": "qinglong/run-cancellation@v1", "mutationId": "m-cancel"}
            run = seed.runs_p[-1]
            assert (
                await user_call(http, shell, "POST", f"{base}/{run}/cancellation", token=token, body=cancel)
            ).status == 202
            assert (await user_call(http, shell, "GET", f"{base}/{run}", token=token)).status == 200
            assert (await user_call(http, shell, "GET", f"{base}/{run}", token=None)).status == 401
            assert (await user_call(http, shell, "GET", f"{base}?limit=1", token=token)).status == 200
            assert (await user_call(http, shell, "GET", f"{base}?limit=0", token=token)).status == 400
            assert (await user_call(http, shell, "GET", f"{base}/{run}/output", token=token)).status == 200
            tasks = f"/api/v3/projects/{seed.project_p}/tasks"
            assert (await user_call(http, shell, "GET", tasks, token=token)).status == 200
            secrets = f"/api/v3/projects/{seed.project_p}/secrets"  # an operator reads them, never writes
            secret = {"schema": "qinglong/secret@v1", "mutationId": "m-secret", "value": "c2VjcmV0"}
            assert (await user_call(http, shell, "PUT", f"{secrets}/API_KEY", token=token, body=secret)).status == 403
            deletion = {"schema": "qinglong/secret@v1", "mutationId": "m-secret"}
            reply = await user_call(http, shell, "POST", f"{secrets}/API_KEY/deletion", token=token, body=deletion)
            assert reply.status == 403
            assert (await user_call(http, shell, "GET", secrets, token=token)).status == 200
            project = f"/api/v3/projects/{seed.project_p}"
            assert (await user_call(http, shell, "GET", project, token=token)).status == 200
            assert (await user_call(http, shell, "GET", f"{project}/workers", token=token)).status == 200
            assert (await user_call(http, shell, "GET", "/api/v3/projects", token=token)).status == 200
            task = f"{project}/tasks/job"  # an operator runs tasks, never writes them (task.write)
            revision = {"schema": "qinglong/task@v1", "mutationId": "m-task", "plan": {"argv": ["true"]}}
            assert (await user_call(http, shell, "PUT", task, token=token, body=revision)).status == 403
            status = {"schema": "qinglong/task@v1", "active": False}
            assert (await user_call(http, shell, "PUT", f"{task}/status", token=token, body=status)).status == 403
            schedule = {"schema": "qinglong/task@v1", "cron": "* * * * *", "timezone": "UTC"}
            assert (await user_call(http, shell, "PUT", f"{task}/schedule", token=token, body=schedule)).status == 403
            preview = f"{project}/schedule-preview?cron=*%2F5+*+*+*+*&timezone=UTC&count=2"
            assert (await user_call(http, shell, "GET", preview, token=token)).status == 200
            rule = {"schema": "qinglong/notify@v1", "events": ["run.failed"], "channel": "webhook",
                    "url": "https://hooks.example.com/h", "secretName": "NO_SUCH"}  # fmt: skip
            rules = f"{project}/notify-rules"
            assert (await user_call(http, shell, "PUT", f"{rules}/ops", token=token, body=rule)).status == 404
            removal = {"schema": "qinglong/notify@v1"}
            reply = await user_call(http, shell, "POST", f"{rules}/ops/removal", token=token, body=removal)
            assert reply.status == 404
            assert (await user_call(http, shell, "GET", rules, token=token)).status == 200
            history = f"{project}/notify-deliveries?limit=5"
            assert (await user_call(http, shell, "GET", history, token=token)).status == 200
        after = await scrape()
        delta = after - before
        assert delta == Counter(
            {
                ("worker.session.open", "200"): 1,
                ("worker.session.heartbeat", "200"): 1,
                ("worker.session.heartbeat", "409"): 1,
                ("worker.offers.pull", "200"): 1,
                ("worker.activation", "200"): 2,
                ("worker.lease_control", "200"): 3,
                ("worker.artifacts", "200"): 1,
                ("worker.completion", "200"): 1,
                ("user.runs.enqueue", "202"): 1,
                ("user.runs.cancel", "202"): 1,
                ("user.runs.read", "200"): 1,
                ("user.runs.read", "401"): 1,
                ("user.runs.list", "200"): 1,
                ("user.projects.list", "200"): 1,
                ("user.runs.list", "400"): 1,
                ("worker.output", "409"): 1,
                ("worker.output_lost", "200"): 1,
                ("worker.bundle_chunks", "409"): 1,
                ("user.runs.output", "200"): 1,
                ("user.tasks.list", "200"): 1,
                ("user.secrets.set", "403"): 1,
                ("user.secrets.delete", "403"): 1,
                ("user.secrets.list", "200"): 1,
                ("user.project.read", "200"): 1,
                ("user.workers.list", "200"): 1,
                ("user.tasks.revise", "403"): 1,
                ("user.tasks.status", "403"): 1,
                ("user.tasks.schedule", "403"): 1,
                ("user.schedules.preview", "200"): 1,
                ("user.notify_rules.set", "404"): 1,
                ("user.notify_rules.remove", "404"): 1,
                ("user.notify_rules.list", "200"): 1,
                ("user.notify_deliveries.list", "200"): 1,
            }
        )
        assert {route for route, _ in after} >= {r.name for r in ROUTES}

        async with admin.get(shell.admin_url + "/healthz") as resp:
            assert resp.status == 200
            assert json.loads(await resp.read()) == {"status": "ok", "warnings": []}
