"""A database projection outside the response contract is a 503 internal.bad_projection, never
forwarded (docs/architecture.md §6). Nothing is patched in SQL: the pipeline runs over a Database whose
`call` returns the real function's result, tampered for one function (an extra key, a wrong type, an
unknown status or fence reason; the admission's result included), or a function's non-object
result through the shell's own check (db._fetch). The error body must hold nothing of the projection.
Touches: a fresh database, the in-process shell on loopback.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from qinglong.shell.db import Database, _fetch, statement
from tests.conftest import Database as PgDatabase
from tests.integration.shell.conftest import (
    SESSION_SCHEMA,
    Pki,
    Reply,
    Seed,
    Shell,
    WorkerClient,
    seed_database,
    serve_shell,
    user_call,
    user_http,
)

pytestmark = pytest.mark.db

MARKER = "projection-marker-7f3a"
Tamper = Callable[[dict[str, Any]], dict[str, Any]]


class TamperingDatabase(Database):
    """The real Database, but `function`'s results pass through `tamper` (the originals are kept)."""

    def __init__(self, dsn: str, function: str, tamper: Tamper) -> None:
        super().__init__(dsn)
        self.function, self.tamper = function, tamper
        self.originals: list[dict[str, Any]] = []

    async def call(
        self, function: str, args: Mapping[str, object], *, serializable: bool = False, grouped: bool = False
    ) -> dict[str, Any]:
        result = await super().call(function, args, serializable=serializable, grouped=grouped)
        if function != self.function:
            return result
        self.originals.append(json.loads(json.dumps(result)))
        return self.tamper(result)


def _extra_key(result: dict[str, Any]) -> dict[str, Any]:
    return {**result, "leak": MARKER}


def _nested(key: str, inner: str, value: Any) -> Tamper:
    return lambda r: {**r, key: {**r[key], inner: value}}


CASES: dict[str, tuple[str, str, Tamper]] = {
    "heartbeat: extra key": ("heartbeat", "worker_session_heartbeat_v1", _extra_key),
    "heartbeat: expiry as a string": (
        "heartbeat",
        "worker_session_heartbeat_v1",
        lambda r: {**r, "expiresAtMs": str(r["expiresAtMs"])},
    ),
    "session open: carries a sessionKey": ("open", "worker_session_open_v1", lambda r: {**r, "sessionKey": MARKER}),
    "pull: offer with an extra key": ("pull", "offer_pull_v1", _nested("offer", "tokenDigest", MARKER)),
    "pull: lease version as a float": ("pull", "offer_pull_v1", _nested("offer", "leaseVersion", 1.5)),
    "pull: unknown status": ("pull", "offer_pull_v1", lambda r: {**r, "status": "offered_twice"}),
    "pull: unknown fence reason": (
        "pull",
        "offer_pull_v1",
        lambda r: {"status": "fenced", "reason": MARKER.replace("-", "_")},
    ),
    "timeline: unknown run status": ("read", "run_timeline_v2", _nested("run", "status", "exploded")),
    "timeline: extra key": ("read", "run_timeline_v2", _extra_key),
    "cancel: reason outside the enum": ("cancel", "run_cancel_request_v1", lambda r: {**r, "reason": MARKER}),
    "enqueue: runId not a uuid": ("enqueue", "run_enqueue_v1", lambda r: {**r, "runId": MARKER}),
    "admission: unknown decision": (
        "read",
        "request_admission_v1",
        lambda r: {**r, "decision": "maybe", "reason": MARKER},
    ),
    "admission: allow without subjectId": (
        "cancel",
        "request_admission_v1",
        lambda r: {k: v for k, v in r.items() if k != "subjectId"},
    ),
    "admission: projectVersion as text": (
        "cancel",
        "request_admission_v1",
        lambda r: {**r, "projectVersion": MARKER},
    ),
    "admission: bindingVersion missing": (
        "enqueue",
        "request_admission_v1",
        lambda r: {k: v for k, v in r.items() if k != "bindingVersion"},
    ),
}


async def _request(action: str, pki: Pki, shell: Shell, seed: Seed) -> Reply:
    async with WorkerClient(shell, seed.worker_a, pki.client_context(pki.worker_a)) as worker, user_http(pki) as http:
        if action == "open":
            return await worker.open()
        if action in ("heartbeat", "pull"):
            assert (await worker.open()).status == 200
            if action == "heartbeat":
                return await worker.post("/heartbeat", {"schema": SESSION_SCHEMA, "workerGeneration": 1})
            return await worker.post(
                "/offers:pull", {"schema": "qinglong/remote-offer@v1", "pullId": str(uuid.uuid4())}
            )
        base = f"/api/v3/projects/{seed.project_p}/runs"
        token = seed.operator.token
        if action == "read":
            return await user_call(http, shell, "GET", f"{base}/{seed.runs_p[0]}", token=token)
        if action == "cancel":
            body = {"schema": "qinglong/run-cancellation@v1", "mutationId": "m-1"}
            return await user_call(http, shell, "POST", f"{base}/{seed.runs_p[0]}/cancellation", token=token, body=body)
        assert action == "enqueue"
        body = {"schema": "qinglong/run-enqueue@v1", "taskId": seed.task_p, "mutationId": "m-1"}
        return await user_call(http, shell, "POST", base, token=token, body=body)


def _values(obj: Any) -> list[str]:
    """Every scalar of a JSON value, as text (what a leak of the projection would show)."""
    if isinstance(obj, dict):
        return [s for k, v in obj.items() for s in (k, *_values(v))]
    if isinstance(obj, list):
        return [s for v in obj for s in _values(v)]
    return [] if obj is None or isinstance(obj, bool) else [str(obj)]


@pytest.mark.parametrize("case", list(CASES))
async def test_bad_projection_is_503_and_not_forwarded(case: str, pki: Pki, database: PgDatabase) -> None:
    action, function, tamper = CASES[case]
    seed = seed_database(database.dsn(), pki)
    db = TamperingDatabase(database.runtime_dsn, function, tamper)
    async with serve_shell(db, pki) as shell:
        reply = await _request(action, pki, shell, seed)
    assert (reply.status, reply.code) == (503, "internal.bad_projection"), reply
    assert len(db.originals) == 1
    body = reply.json()
    assert set(body) == {"schema", "code", "message", "requestId"}
    text = reply.body.decode()
    ids = {str(v) for v in (seed.project_p, seed.task_p, *seed.runs_p, seed.worker_a)}
    leaked = [v for v in {MARKER, *_values(db.originals[0])} - {"status", "reason"} if len(v) >= 8 and v in text]
    assert leaked == [] and not any(i in text for i in ids), text
    for key in ("leaseToken", "sessionKey", "offer", "snapshot", "leak"):
        assert f'"{key}"' not in text


class NonObjectDatabase(Database):
    """For `function`, runs the real function but returns its result wrapped in a JSON array, through
    the shell's own result check (db._fetch): what a function answering a non-object looks like."""

    def __init__(self, dsn: str, function: str) -> None:
        super().__init__(dsn)
        self.function = function

    async def call(
        self, function: str, args: Mapping[str, object], *, serializable: bool = False, grouped: bool = False
    ) -> dict[str, Any]:
        if function != self.function:
            return await super().call(function, args, serializable=serializable, grouped=grouped)
        query = b"select jsonb_build_array(" + statement(function, tuple(args)).removeprefix(b"select ") + b")"
        async with self._pool.connection() as conn:
            return await _fetch(conn, query, list(args.values()))


@pytest.mark.parametrize(
    ("action", "function"), [("heartbeat", "worker_session_heartbeat_v1"), ("read", "run_timeline_v2")]
)
async def test_non_object_result_is_503(action: str, function: str, pki: Pki, database: PgDatabase) -> None:
    seed = seed_database(database.dsn(), pki)
    async with serve_shell(NonObjectDatabase(database.runtime_dsn, function), pki) as shell:
        reply = await _request(action, pki, shell, seed)
    assert (reply.status, reply.code) == (503, "internal.bad_projection"), reply
