"""The SQL↔wire agreement on results, against the deployed database: real calls of every routed ql_api
function are driven into each of its success statuses, and each result is checked as the shell checks
it (the route's response contract, `from_result` with the fields the shell adds) and more strictly:
the message is exactly the result (nothing dropped, nothing defaulted) and, at every level of nesting,
the contract declares exactly the result's keys. Each test ends by checking it saw every status the
contracts of its routes declare. Calls go through the shell's own statement (named notation). The plan names
two Project secrets, set through the set route's own binder (sealed): a starting ACK's sealed versions are
checked against the shell's SealedSecret, then opened as the shell opens them.
Touches: one fresh database per test.
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from qinglong.shell.db import statement
from qinglong.shell.routes import ROUTES, Admission, Call, Route, SealedSecret, mint_token, open_delivery
from qinglong.shell.sealing import Sealer
from qinglong.wire import CompletionArtifact, Message, OfferEmpty, Record, SecretSetRequest, Variants, ql3w
from qinglong.wire.common import token_digest
from qinglong.wire.fields import Enum, List, Nested
from tests.conftest import Database
from tests.integration.db.factories import (
    CERT,
    Subject,
    digest,
    make_project,
    make_revision,
    make_runs,
    make_user,
    make_worker,
    set_role,
)

pytestmark = pytest.mark.db

POOL = "shapes"
# Every key ql.plan_is_valid admits, so the offer's plan shows every key of the Plan contract.
SECRETS = {"DB_PASSWORD": b"a database password", "API_KEY": b"\x00an api key\xff"}
PLAN = {
    "argv": ["sh", "-c", "true"],
    "env": {"A": "1"},
    "timeoutMs": 60000,
    "maxAttempts": 2,
    "retryBackoffMs": 0,
    "pool": POOL,
    "cwd": "build",
    "user": "nobody",
    "group": "nogroup",
    "secretEnv": {"PGPASSWORD": "DB_PASSWORD"},
    "secretFiles": {"conf/api.key": "API_KEY"},
}
SECRET = bytes(32)
ROUTE: Mapping[str, Route] = {r.name: r for r in ROUTES}


def declared_statuses(route: Route) -> set[str]:
    if isinstance(route.response, Variants):
        return set(route.response.by_status)
    spec = route.response.field("status").spec
    assert isinstance(spec, Enum)
    return set(spec.values)


def assert_declares_exactly(cls: type[Record], obj: Mapping[str, Any], where: str) -> None:
    """The contract's keys (but what the shell adds, and an optional key the result leaves out: the activation
    answer's `secrets`) are the result's keys, at every level."""
    absent = {f.name for f in cls.FIELDS if f.optional and f.name not in obj}
    assert set(obj) == {f.name for f in cls.FIELDS if not f.from_shell} - absent, where
    for f in cls.FIELDS:
        value, spec = obj.get(f.name), f.spec
        if isinstance(spec, Nested) and value is not None:
            assert_declares_exactly(spec.record, value, f"{where}.{f.name}")
        if isinstance(spec, List) and isinstance(spec.item, Nested):
            for i, item in enumerate(value or ()):
                assert_declares_exactly(spec.item.record, item, f"{where}.{f.name}[{i}]")


@dataclass
class Rig:
    """A Project with a task (PLAN), a Worker of its pool, the runtime connection and what was seen."""

    su: psycopg.Connection[Any]
    rt: psycopg.Connection[Any]
    project: uuid.UUID
    task: uuid.UUID
    revision: uuid.UUID
    worker: uuid.UUID
    sealer: Sealer = field(default_factory=lambda: Sealer(bytes(range(32))))
    seen: dict[str, set[str]] = field(default_factory=dict)

    def _call(self, function: str, args: Mapping[str, object]) -> tuple[Any, ...] | None:
        return psycopg.RawCursor(self.rt).execute(statement(function, tuple(args)), list(args.values())).fetchone()

    def drive(self, route_name: str, *, token: str | None = None, **args: Any) -> dict[str, Any]:
        """Call the route's function with these arguments (by name) as the shell does; check the
        success result against the route's response contract; return it."""
        route = ROUTE[route_name]
        with self.rt.transaction():
            if route.serializable:
                self.rt.execute("set transaction isolation level serializable")
            row = self._call(route.function, args)
        assert row is not None
        result: dict[str, Any] = row[0]
        worker = args.get("p_worker_id")
        call = Call(
            {}, None, ql3w.Keyring(SECRET), worker_id=None if worker is None else str(worker), minted_token=token,
            sealer=self.sealer,
        )  # fmt: skip
        if route.sealing == "open" and "secrets" in result:  # the sealed part, exactly; then opened as app.py does
            for i, item in enumerate(result["secrets"]):
                assert_declares_exactly(SealedSecret, item, f"{route_name} secrets[{i}] (sealed)")
            result = open_delivery(call, result)
        added = route.shell_fields(call, result)
        message: Message = route.response.from_result(result, **added)
        assert message.to_obj() == {**result, "schema": message.SCHEMA, **added}, route_name
        assert_declares_exactly(type(message), result, f"{route_name} {result['status']}")
        self.seen.setdefault(route_name, set()).add(result["status"])
        return result

    def assert_saw_every_status(self, *route_names: str) -> None:
        for name in route_names:
            assert self.seen.get(name) == declared_statuses(ROUTE[name]), name

    # -- the Worker's side --

    def open(self, worker: uuid.UUID | None = None, capacity: int = 2) -> uuid.UUID:
        opened = self.drive(
            "worker.session.open",
            p_worker_id=worker or self.worker,
            p_worker_generation=1,
            p_cert_fingerprint=digest(CERT),
            p_capacity=capacity,
        )
        return uuid.UUID(opened["sessionId"])

    def pull(self, session: uuid.UUID, pull_id: uuid.UUID | None = None, worker: uuid.UUID | None = None) -> Pulled:
        token = mint_token()
        result = self.drive(
            "worker.offers.pull",
            token=token,
            p_worker_id=worker or self.worker,
            p_session_id=session,
            p_worker_generation=1,
            p_token_digest=token_digest(token),
            p_pull_id=pull_id or uuid.uuid4(),
        )
        return Pulled(self, session, result.get("offer", {}), token, result)

    # -- the user's side --

    def user(self, role: str = "operator") -> Subject:
        subject = make_user(self.su)
        set_role(self.su, self.project, subject, role, True)
        return subject

    def admit(self, subject: Subject, permission: str, route: str) -> dict[str, Any]:
        name = self.su.execute("select name from ql.projects where id = %s", (self.project,)).fetchone()
        assert name is not None
        for project in (str(name[0]), str(self.project)):  # by name (v2), then by id (v1): both shapes
            function, args = Admission.call(digest(subject.token), project, permission, route, f"r-{uuid.uuid4().hex}")
            row = self._call(function, args)
            assert row is not None
            result: dict[str, Any] = row[0]
            assert Admission.from_obj(result).to_obj() == result
            named = function == "request_admission_v2" and result["decision"] == "allow"
            assert ("projectId" in result) == named, result  # v2 names the id of an admitted project only
            assert_declares_exactly(Admission, {"projectId": None, **result}, "admission")
        self.seen.setdefault("admission", set()).add(result["decision"])
        return result

    def secret_set(self, subject: Subject, name: str, value: bytes, mutation: str) -> dict[str, Any]:
        """A set as the shell makes it: admitted, then the route's own binder seals the value."""
        admitted = self.admit(subject, "secret.write", "user.secrets.set")
        call = Call(
            {"name": name}, SecretSetRequest(mutation_id=mutation, value=value), None, subject_id=str(subject.id),
            project_id=str(self.project), project_version=admitted["projectVersion"],
            binding_version=admitted["bindingVersion"], sealer=self.sealer,
        )  # fmt: skip
        args: dict[str, Any] = ROUTE["user.secrets.set"].bind(call)
        return self.drive("user.secrets.set", **args)

    def secret_delete(self, subject: Subject, name: str, mutation: str) -> dict[str, Any]:
        admitted = self.admit(subject, "secret.write", "user.secrets.delete")
        return self.drive(
            "user.secrets.delete",
            p_subject_id=subject.id,
            p_project_id=self.project,
            p_name=name,
            p_mutation_id=mutation,
            p_admitted_project_version=admitted["projectVersion"],
            p_admitted_binding_version=admitted["bindingVersion"],
        )

    def cancel(self, subject: Subject, run: uuid.UUID) -> dict[str, Any]:
        admitted = self.admit(subject, "run.stop", "user.runs.cancel")
        return self.drive(
            "user.runs.cancel",
            p_subject_id=subject.id,
            p_project_id=self.project,
            p_run_id=run,
            p_mutation_id=f"m-{uuid.uuid4().hex}",
            p_admitted_project_version=admitted["projectVersion"],
            p_admitted_binding_version=admitted["bindingVersion"],
        )


@dataclass
class Pulled:
    """A pulled offer (or an empty answer) and the calls a Worker makes on it."""

    rig: Rig
    session: uuid.UUID
    offer: dict[str, Any]
    token: str
    result: dict[str, Any]
    lease_version: int = 1

    @property
    def run(self) -> uuid.UUID:
        return uuid.UUID(self.offer["runId"])

    def fence(self) -> dict[str, Any]:
        o = self.offer
        return {
            "p_worker_id": self.rig.worker,
            "p_session_id": self.session,
            "p_worker_generation": 1,
            "p_project_id": o["projectId"],
            "p_run_id": o["runId"],
            "p_attempt_id": o["attemptId"],
            "p_offer_id": o["offerId"],
            "p_lease_generation": o["leaseGeneration"],
            "p_token_digest": token_digest(self.token),
        }

    def activate(self, phase: str, error_code: str | None = None) -> dict[str, Any]:
        return self.rig.drive(
            "worker.activation", p_phase=phase, **self.fence(), p_error_code=error_code, p_error_message=None
        )

    def lease_control(self, *, running: bool = False) -> dict[str, Any]:
        result = self.rig.drive(
            "worker.lease_control", **self.fence(), p_expected_version=self.lease_version, p_running=running
        )
        self.lease_version = result.get("leaseVersion", self.lease_version)
        return result

    def upload(self, content: bytes) -> dict[str, Any]:
        return self.rig.drive(
            "worker.artifacts",
            **self.fence(),
            p_kind="log",
            p_sha256=hashlib.sha256(content).digest(),
            p_size=len(content),
            p_content=content,
        )

    def complete(self, receipts: list[dict[str, Any]], exit_code: int | None, error_code: str | None = None) -> Any:
        artifacts = [
            CompletionArtifact(artifact_id=r["artifactId"], sha256=r["sha256"], size=r["size"]).to_obj()
            for r in receipts
        ]  # the receipt as the wire's completion carries it: the keys the database demands
        return self.rig.drive(
            "worker.completion",
            **self.fence(),
            p_lease_version=self.lease_version,
            p_exit_code=exit_code,
            p_error_code=error_code,
            p_artifacts=Jsonb(artifacts),
        )


@pytest.fixture
def rig(database: Database) -> Iterator[Rig]:
    with (
        psycopg.connect(database.dsn(), autocommit=True) as su,
        psycopg.connect(database.runtime_dsn, autocommit=True) as rt,
    ):
        project = make_project(su)
        revision = make_revision(su, project, PLAN)
        row = su.execute("select task_id from ql.task_execution_revisions where id = %s", (revision,)).fetchone()
        assert row is not None
        rig = Rig(su, rt, project, row[0], revision, make_worker(su, POOL))
        owner = rig.user("owner")
        for name, value in SECRETS.items():  # the secrets PLAN names
            assert rig.secret_set(owner, name, value, f"set-{name}")["status"] == "set"
        yield rig


def test_sessions_and_offers(rig: Rig) -> None:
    make_runs(rig.su, rig.revision, 1)
    rig.open(capacity=1)
    session = rig.open(capacity=1)  # replaces the first: replacedSessionId is set
    rig.drive("worker.session.heartbeat", p_worker_id=rig.worker, p_session_id=session, p_worker_generation=1)

    pull_id = uuid.uuid4()
    offered = rig.pull(session, pull_id)
    assert offered.result["status"] == "offered" and offered.offer["plan"] == PLAN
    assert rig.pull(session, pull_id).result["status"] == "offered"  # a replay: the same offer
    assert rig.pull(session).result == {"status": "empty", "reason": "at_capacity"}
    other = make_worker(rig.su, POOL)
    assert rig.pull(rig.open(other), worker=other).result == {"status": "empty", "reason": "no_work"}
    replayed = rig.pull(session, pull_id)  # the offer again, with the replay's token
    replayed.activate("starting")
    assert rig.pull(session, pull_id).result == {"status": "empty", "reason": "pull_spent"}

    reasons = OfferEmpty.field("reason").spec
    assert isinstance(reasons, Enum)
    assert {"no_work", "at_capacity", "pull_spent"} == set(reasons.values)
    rig.assert_saw_every_status("worker.session.open", "worker.session.heartbeat", "worker.offers.pull")


def test_a_worker_s_calls_and_user_cancellation(rig: Rig) -> None:
    make_runs(rig.su, rig.revision, 3)
    operator = rig.user()
    session = rig.open(capacity=3)
    a, b, c = (rig.pull(session) for _ in range(3))

    # a: every activation status, renewals, an artifact, completion and its replay, then terminal.
    starting = a.activate("starting")  # delivers the opened values of the secrets PLAN names
    assert starting["status"] == "applied"
    assert {s["name"]: base64.b64decode(s["value"]) for s in starting["secrets"]} == SECRETS
    assert a.activate("starting")["status"] == "already_starting"
    assert a.activate("running")["status"] == "applied"
    assert a.activate("running")["status"] == "already_running"
    assert a.lease_control()["status"] == "renewed"
    receipt = a.upload(b"hello from the task\n")["receipt"]
    done = a.complete([receipt], exit_code=0)
    assert done["status"] == "completed" and done["snapshot"]["artifacts"] == [receipt]
    assert a.complete([receipt], exit_code=0)["status"] == "already_completed"
    assert a.lease_control()["status"] == "terminal"
    assert a.activate("running")["status"] == "already_terminal"

    # b: cancelled while queued (its offer claimed): the starting ACK spawns nothing.
    assert rig.cancel(operator, b.run)["status"] == "accepted"
    assert b.activate("starting")["status"] == "not_started"

    # c: cancelled while running (its renewal took the running ACK along): the next lease control asks to stop;
    # then the Run ends.
    c.activate("starting")
    assert c.lease_control(running=True)["status"] == "renewed"
    assert c.activate("running")["status"] == "already_running"
    assert rig.cancel(operator, c.run)["status"] == "accepted"
    assert rig.cancel(operator, c.run)["status"] == "already_requested"
    assert c.lease_control()["status"] == "stop_requested"
    assert c.complete([], exit_code=None, error_code="process.killed")["runStatus"] == "cancelled"
    assert rig.cancel(operator, c.run)["status"] == "already_terminal"

    timeline = rig.drive("user.runs.read", p_project_id=rig.project, p_run_id=a.run)
    assert [e["sequence"] for e in timeline["events"]] == list(range(1, len(timeline["events"]) + 1))
    rig.assert_saw_every_status(
        "worker.activation",
        "worker.lease_control",
        "worker.artifacts",
        "worker.completion",
        "user.runs.cancel",
        "user.runs.read",
    )


def test_secrets_set_delete_and_list(rig: Rig) -> None:
    owner = rig.user("owner")
    assert rig.secret_set(owner, "TOKEN", b"v1", "s-1")["version"] == 1
    assert rig.secret_set(owner, "TOKEN", b"v1", "s-1")["status"] == "already_set"
    assert rig.secret_set(owner, "TOKEN", b"v2", "s-2")["version"] == 2
    listed = rig.drive("user.secrets.list", p_project=str(rig.project))
    assert [s["name"] for s in listed["secrets"]] == ["API_KEY", "DB_PASSWORD", "TOKEN"]
    assert rig.secret_delete(owner, "TOKEN", "d-1")["status"] == "deleted"
    assert rig.secret_delete(owner, "TOKEN", "d-2")["status"] == "already_deleted"
    rig.assert_saw_every_status("user.secrets.set", "user.secrets.delete", "user.secrets.list")


def test_enqueue_and_admission(rig: Rig) -> None:
    operator, viewer = rig.user(), rig.user("viewer")
    token = f"bearer-{uuid.uuid4()}"
    row = rig.su.execute(
        "insert into ql.subjects (kind, name, token_digest) values ('agent', 'agent', %s) returning id",
        (digest(token),),
    ).fetchone()
    assert row is not None
    agent = Subject(row[0], token)
    set_role(rig.su, rig.project, agent, "operator", True)

    admitted = rig.admit(operator, "run.start", "user.runs.enqueue")
    mutation = f"m-{uuid.uuid4().hex}"
    for expected in ("enqueued", "already_enqueued"):
        enqueued = rig.drive(
            "user.runs.enqueue",
            p_subject_id=operator.id,
            p_project_id=rig.project,
            p_task_id=rig.task,
            p_mutation_id=mutation,
            p_admitted_project_version=admitted["projectVersion"],
            p_admitted_binding_version=admitted["bindingVersion"],
        )
        assert enqueued["status"] == expected
    assert rig.admit(viewer, "run.stop", "user.runs.cancel")["decision"] == "deny"
    assert rig.admit(agent, "run.stop", "user.runs.cancel")["decision"] == "require_approval"

    rig.assert_saw_every_status("user.runs.enqueue")
    decisions = Admission.field("decision").spec
    assert isinstance(decisions, Enum)
    assert rig.seen["admission"] == set(decisions.values)
