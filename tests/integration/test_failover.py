"""decision 0000 (ADR-0118 evidence 12) on a real PostgreSQL: a user cancellation intent and a cancellation convergence,
each with its backend terminated right after the driver-confirmed COMMIT, survive the physical
promotion of a synchronous (remote_apply) streaming standby: replays answer already_requested and
scanned 0, and the promoted node holds the same Run version, event sequence, events and dedupe keys
with no duplicate.

Touches: two throw-away clusters in fresh 0755 folders under /tmp (a primary and a standby made by
pg_basebackup), their processes (postgres, pg_basebackup, sqitch); both are stopped and removed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from qinglong import db
from qinglong.devdb import Cluster, server_bindir
from tests.conftest import processes_under

pytestmark = [pytest.mark.db, pytest.mark.failover]

REPO = Path(__file__).resolve().parents[2]
TMP = Path("/tmp")  # noqa: S108  (world-traversable, unlike pytest's tmp_path)
DB = "qinglong"
FIXED_EXECUTOR = "00000000-0000-4000-8000-000000000001"
CANCEL = "ql_api.run_cancel_request_v1(%s, %s, %s, %s, %s, %s)"
CONVERGE = "ql_api.run_cancellation_converge_v1(128)"
CANCEL_ROUTE = "POST /api/v3/projects/{projectId}/runs/{runId}/cancellation"
WAIT_S = 60.0


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def call(conn: psycopg.Connection[Any], fn: str, args: tuple[Any, ...] = ()) -> dict[str, Any]:
    row = conn.execute(f"select {fn}", args).fetchone()
    assert row is not None
    result: dict[str, Any] = row[0]
    return result


def one(conn: psycopg.Connection[Any], sql: str, args: tuple[Any, ...] = ()) -> Any:
    row = conn.execute(sql, args).fetchone()
    assert row is not None, sql
    return row[0]


def wait_for(what: str, probe: Callable[[], bool], timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def as_postgres(command: list[str]) -> list[str]:
    """Run a server tool as the postgres OS user when we are root (as qinglong.devdb does)."""
    if os.geteuid() != 0:
        return command
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", *command]


def tool_env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if not key.startswith("PG")}


def new_root(prefix: str) -> Path:
    root = Path(tempfile.mkdtemp(prefix=prefix, dir=TMP))
    root.chmod(0o755)
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    return root


@dataclass(frozen=True)
class Node:
    """One cluster of the pair, with connections to the test database by role."""

    cluster: Cluster

    def connect(self, user: str = "postgres", *, autocommit: bool = True) -> psycopg.Connection[Any]:
        return psycopg.connect(self.cluster.dsn(DB), user=user, autocommit=autocommit)


@dataclass(frozen=True)
class World:
    project: uuid.UUID
    subject: uuid.UUID
    user_token_digest: bytes
    run: uuid.UUID
    attempt: uuid.UUID


@dataclass(frozen=True)
class Event:
    sequence: int
    event_id: uuid.UUID
    dedupe_key: str
    type: str
    actor_kind: str
    actor_id: uuid.UUID | None
    attempt_id: uuid.UUID | None
    occurred_at_ms: int
    payload: str


@dataclass(frozen=True)
class RunState:
    """What a node holds of the Run: the figures evidence 12 compares across the promotion."""

    status: str
    version: int
    event_sequence: int
    cancel_requested_at_ms: int | None
    cancel_reason: str | None
    attempt_status: str
    events: tuple[Event, ...]
    dedupe_keys: int
    duplicate_event_ids: int
    duplicate_dedupe_keys: int
    mutations: tuple[tuple[Any, ...], ...]

    def figures(self, pre: RunState | None = None) -> str:
        text = (
            f"run {self.status} version {self.version} event_sequence {self.event_sequence}, "
            f"{len(self.events)} events, {self.dedupe_keys} dedupe keys, "
            f"{self.duplicate_event_ids} duplicate event ids, "
            f"{self.duplicate_dedupe_keys} duplicate dedupe keys, "
            f"intent ({self.cancel_requested_at_ms}, {self.cancel_reason}), attempt {self.attempt_status}"
        )
        if pre is not None:
            text += (
                f" | delta from pre-scenario: version +{self.version - pre.version}, "
                f"event_sequence +{self.event_sequence - pre.event_sequence}, "
                f"events +{len(self.events) - len(pre.events)}"
            )
        return text


def read_state(node: Node, w: World) -> RunState:
    with node.connect() as conn:
        run = conn.execute(
            "select status::text, version, event_sequence, cancel_requested_at_ms, cancel_reason::text"
            " from ql.runs where id = %s",
            (w.run,),
        ).fetchone()
        assert run is not None
        attempt = one(conn, "select status::text from ql.run_attempts where id = %s", (w.attempt,))
        events = tuple(
            Event(*row)
            for row in conn.execute(
                "select sequence, event_id, dedupe_key, type, actor_kind::text, actor_id, attempt_id,"
                " occurred_at_ms, payload::text from ql.run_events where run_id = %s order by sequence",
                (w.run,),
            ).fetchall()
        )
        dupes = conn.execute(
            "select count(distinct dedupe_key), count(*) - count(distinct event_id),"
            " count(*) - count(distinct dedupe_key) from ql.run_events where run_id = %s",
            (w.run,),
        ).fetchone()
        assert dupes is not None
        mutations = tuple(
            conn.execute(
                "select mutation_id, command_digest, result::text, created_at_ms from ql.mutations"
                " where subject_id = %s order by mutation_id",
                (w.subject,),
            ).fetchall()
        )
    status, version, sequence, cancel_at, reason = run
    dedupe_keys, duplicate_ids, duplicate_keys = dupes
    return RunState(
        status=status,
        version=version,
        event_sequence=sequence,
        cancel_requested_at_ms=cancel_at,
        cancel_reason=reason,
        attempt_status=attempt,
        events=events,
        dedupe_keys=dedupe_keys,
        duplicate_event_ids=duplicate_ids,
        duplicate_dedupe_keys=duplicate_keys,
        mutations=mutations,
    )


def sqitch(*args: str) -> None:
    result = subprocess.run(db.sqitch(*args), capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, f"sqitch {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"


def base_backup(primary: Cluster, standby_root: Path) -> None:
    data = standby_root / "data"
    data.mkdir(mode=0o700)
    if os.geteuid() == 0:
        shutil.chown(data, "postgres", "postgres")
    command = [str(server_bindir() / "pg_basebackup"), "-h", primary.host, "-p", str(primary.port)]
    command += ["-U", primary.superuser, "-D", str(data), "-R", "-X", "stream", "-c", "fast", "--no-password"]
    result = subprocess.run(
        as_postgres(command),
        cwd=standby_root,
        env=tool_env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, f"pg_basebackup failed:\n{result.stdout}\n{result.stderr}"
    assert (data / "standby.signal").is_file()


def build_world(primary: Node) -> World:
    """A project, a user (token digest only) with an operator binding, a task revision, one queued Run
    whose Attempt a Worker claimed and whose Lease has since expired."""
    user_token = f"user-token-{uuid.uuid4()}"
    with primary.connect() as admin:
        project = one(admin, "insert into ql.projects (name) values ('failover') returning id")
        subject = one(
            admin,
            "insert into ql.subjects (kind, name, token_digest) values ('user', 'alice', %s) returning id",
            (digest(user_token),),
        )
        binding = call(admin, "ql_api.role_binding_set_v1(%s, %s, 'operator', true)", (project, subject))
        assert binding["status"] == "set", binding
        task = one(admin, "insert into ql.tasks (project_id, name) values (%s, 'sleepy') returning id", (project,))
        revision = one(
            admin,
            "insert into ql.task_execution_revisions (task_id, project_id, plan_json, executor_revision_id)"
            " values (%s, %s, %s, %s) returning id",
            (task, project, json.dumps({"argv": ["sleep", "3600"]}), FIXED_EXECUTOR),
        )
        admin.execute("update ql.tasks set current_revision_id = %s where id = %s", (revision, task))
        worker = one(
            admin,
            "insert into ql.workers (name, cert_fingerprint) values ('edge-1', %s) returning id",
            (digest("worker-cert"),),
        )
    with primary.connect("ql_runtime") as rt:
        admitted = call(
            rt,
            "ql_api.request_admission_v1(%s, %s, 'run.start', 'POST /api/v3/projects/{projectId}/runs', %s)",
            (digest(user_token), project, "req-enqueue-1"),
        )
        assert admitted["decision"] == "allow", admitted
        enqueued = call(
            rt,
            "ql_api.run_enqueue_v1(%s, %s, %s, %s, %s, %s)",
            (subject, project, task, "enqueue-1", admitted["projectVersion"], admitted["bindingVersion"]),
        )
        assert enqueued["status"] == "enqueued", enqueued
        opened = call(rt, "ql_api.worker_session_open_v1(%s, 1, %s, 4)", (worker, digest("worker-cert")))
        assert opened["status"] == "opened", opened
        pulled = call(
            rt,
            "ql_api.offer_pull_v1(%s, %s, 1, %s)",
            (worker, opened["sessionId"], digest(f"lease-token-{uuid.uuid4()}")),
        )
        assert pulled["status"] == "offered", pulled
    offer = pulled["offer"]
    with primary.connect() as admin:
        # The Worker vanished: its Lease (= offer expiry) lies in the past, so convergence may end
        # the Attempt.
        admin.execute(
            "update ql.run_leases set expires_at_ms = ql.now_ms() - 60000 where attempt_id = %s",
            (offer["attemptId"],),
        )
        admin.execute(
            "update ql.run_attempts set offer_expires_at_ms = ql.now_ms() - 60000 where offer_id = %s",
            (offer["offerId"],),
        )
    return World(
        project=project,
        subject=subject,
        user_token_digest=digest(user_token),
        run=uuid.UUID(offer["runId"]),
        attempt=uuid.UUID(offer["attemptId"]),
    )


def terminate(primary: Node, pid: int) -> None:
    """Kill a backend from a superuser connection and wait until it is gone."""
    with primary.connect() as admin:
        assert one(admin, "select pg_terminate_backend(%s, 5000)", (pid,)) is True
        assert one(admin, "select count(*) from pg_stat_activity where pid = %s", (pid,)) == 0


def cancel_once(node: Node, command: tuple[Any, ...], *, kill_after_commit: bool) -> dict[str, Any]:
    """`run_cancel_request_v1` in its own SERIALIZABLE transaction on a fresh ql_runtime connection."""
    with node.connect("ql_runtime") as conn:
        pid = conn.info.backend_pid
        conn.execute("begin isolation level serializable")
        result = call(conn, CANCEL, command)
        conn.execute("commit")  # returns once the server confirmed the COMMIT
        if kill_after_commit:
            terminate(node, pid)
            with pytest.raises(psycopg.OperationalError):
                conn.execute("select 1")
    return result


def converge_once(node: Node, *, kill_after_commit: bool) -> dict[str, Any]:
    """One convergence page in its own transaction on a fresh ql_scheduler connection."""
    with node.connect("ql_scheduler") as conn:
        pid = conn.info.backend_pid
        conn.execute("begin")
        result = call(conn, CONVERGE)
        conn.execute("commit")
        if kill_after_commit:
            terminate(node, pid)
            with pytest.raises(psycopg.OperationalError):
                conn.execute("select 1")
    return result


@pytest.fixture
def roots() -> Iterator[tuple[Path, Path]]:
    primary, standby = new_root("ql-failover-primary-"), new_root("ql-failover-standby-")
    try:
        yield primary, standby
    finally:
        shutil.rmtree(primary, ignore_errors=True)
        shutil.rmtree(standby, ignore_errors=True)


def test_cancellation_and_convergence_survive_promotion(
    roots: tuple[Path, Path], record_property: Callable[[str, object], None]
) -> None:
    primary_root, standby_root = roots
    primary_cluster = Cluster(
        primary_root, fsync=True, preload_cron=False, settings={"synchronous_commit": "remote_apply"}
    )
    standby_cluster: Cluster | None = None
    figures: list[str] = []

    def report(line: str) -> None:
        figures.append(line)  # printed in `finally`, so a failing run shows how far it got

    try:
        primary_cluster.start()
        primary = Node(primary_cluster)
        with psycopg.connect(primary_cluster.dsn(), autocommit=True) as conn:
            conn.execute(f"create database {DB}")
        sqitch("deploy", "--quiet", primary_cluster.sqitch_target(DB))

        # -- the standby: a base backup with -R, streaming, then made the synchronous standby ----------
        base_backup(primary_cluster, standby_root)
        standby_cluster = Cluster(standby_root, fsync=True, preload_cron=False)
        assert standby_cluster.port != primary_cluster.port
        standby_cluster.start()
        standby = Node(standby_cluster)
        with standby.connect() as conn:
            assert one(conn, "select pg_is_in_recovery()") is True
            conninfo = one(conn, "show primary_conninfo")
            assert "host=127.0.0.1" in conninfo and f"port={primary_cluster.port}" in conninfo, conninfo
            assert one(conn, "show port") == str(standby_cluster.port)
            assert one(conn, "show synchronous_standby_names") == ""

        def replication() -> tuple[str, str]:
            with psycopg.connect(primary_cluster.dsn(), autocommit=True) as conn:
                row = conn.execute("select state, sync_state from pg_stat_replication").fetchone()
            return ("", "") if row is None else (row[0], row[1])

        wait_for("the standby to stream", lambda: replication()[0] == "streaming")
        with psycopg.connect(primary_cluster.dsn(), autocommit=True) as conn:
            conn.execute("alter system set synchronous_standby_names = '*'")
            conn.execute("select pg_reload_conf()")
        wait_for("sync_state sync", lambda: replication() == ("streaming", "sync"))
        report(
            f"replication: primary :{primary_cluster.port} -> standby :{standby_cluster.port}, "
            f"{replication()}, synchronous_commit remote_apply"
        )

        w = build_world(primary)
        pre = read_state(primary, w)
        report(f"pre-scenario (primary): {pre.figures()}")
        assert [e.type for e in pre.events] == ["run.queued"]  # the claim is on the Attempt row
        assert (pre.status, pre.attempt_status, pre.cancel_requested_at_ms) == ("queued", "claimed", None)

        # -- (a) user cancellation; the backend dies right after the confirmed COMMIT ----------------
        with primary.connect("ql_runtime") as rt:
            assert one(rt, "show synchronous_commit") == "remote_apply"
            admitted = call(
                rt,
                "ql_api.request_admission_v1(%s, %s, 'run.stop', %s, %s)",
                (w.user_token_digest, w.project, CANCEL_ROUTE, "req-cancel-1"),
            )
        assert admitted["decision"] == "allow", admitted
        command = (
            w.subject,
            w.project,
            w.run,
            "cancel-1",
            admitted["projectVersion"],
            admitted["bindingVersion"],
        )
        accepted = cancel_once(primary, command, kill_after_commit=True)
        assert accepted["status"] == "accepted" and accepted["reason"] == "user", accepted
        # remote_apply: the confirmed COMMIT is already visible on the standby, without waiting.
        on_standby = read_state(standby, w)
        assert on_standby.cancel_requested_at_ms == accepted["cancelRequestedAtMs"], on_standby.figures()
        replay = cancel_once(primary, command, kill_after_commit=False)
        assert replay["status"] == "already_requested", replay
        assert replay["cancelRequestedAtMs"] == accepted["cancelRequestedAtMs"], (replay, accepted)
        after_a = read_state(primary, w)
        assert len(after_a.events) == len(pre.events) + 1, after_a.figures(pre)
        report(
            f"(a) cancellation: {accepted['status']} at {accepted['cancelRequestedAtMs']}, "
            f"backend terminated after COMMIT; replay -> {replay['status']} "
            f"at {replay['cancelRequestedAtMs']}, "
            f"events +{len(after_a.events) - len(pre.events)}"
        )

        # -- (b) convergence; the backend dies right after the confirmed COMMIT ----------------------
        page = converge_once(primary, kill_after_commit=True)
        assert (page["status"], page["scanned"], page["converged"], page["blocked"]) == ("ok", 1, 1, 0), page
        assert page["convergedRunIds"] == [str(w.run)], page
        assert read_state(standby, w).status == "cancelled"  # remote_apply again
        rerun = converge_once(primary, kill_after_commit=False)
        assert (rerun["scanned"], rerun["converged"], rerun["blocked"]) == (0, 0, 0), rerun
        report(
            f"(b) convergence: scanned {page['scanned']} converged {page['converged']}, backend terminated "
            f"after COMMIT; rerun -> scanned {rerun['scanned']}"
        )

        # -- what the old primary holds, and the standby before promotion ----------------------------
        final = read_state(primary, w)
        scenario = final.events[len(pre.events) :]
        assert [(e.type, e.actor_kind) for e in scenario] == [
            ("run.cancel_requested", "user"),
            ("attempt.cancelled", "reconciler"),
            ("run.cancelled", "reconciler"),
        ], final.figures(pre)
        assert [e.sequence for e in final.events] == list(range(1, final.event_sequence + 1))
        assert final.version == 1 + final.event_sequence
        assert final.version - pre.version == 3 and final.event_sequence - pre.event_sequence == 3, final.figures(pre)
        assert len(final.events) - len(pre.events) == 3 and final.dedupe_keys == len(final.events)
        assert (final.duplicate_event_ids, final.duplicate_dedupe_keys) == (0, 0)
        assert (final.status, final.attempt_status) == ("cancelled", "cancelled")
        assert (final.cancel_requested_at_ms, final.cancel_reason) == (
            accepted["cancelRequestedAtMs"],
            "user",
        )
        assert scenario[0].actor_id == w.subject
        with primary.connect() as conn:
            stable = conn.execute(
                "select ql.stable_event_id('ql.converge.attempt', %s, %s, %s),"
                " ql.stable_event_id('ql.converge.run', %s, %s, %s)",
                (w.run, w.attempt, final.cancel_requested_at_ms) * 2,
            ).fetchone()
        assert stable == (scenario[1].event_id, scenario[2].event_id), (stable, scenario)
        report(f"old primary: {final.figures(pre)}")
        for event in scenario:
            report(
                f"  event {event.sequence} {event.type} actor {event.actor_kind} id {event.event_id} "
                f"dedupe {event.dedupe_key}"
            )
        before_promotion = read_state(standby, w)
        assert before_promotion == final, f"standby before promotion: {before_promotion.figures(pre)}"
        report(f"standby before promotion: {before_promotion.figures(pre)}")

        # -- failover: the primary goes away, the standby is promoted --------------------------------
        primary_cluster.stop()
        with standby.connect() as conn:
            assert one(conn, "select pg_promote(wait => true, wait_seconds => 60)") is True
            assert one(conn, "select pg_is_in_recovery()") is False
            conn.execute("checkpoint")
            timeline = one(conn, "select timeline_id from pg_control_checkpoint()")
        assert timeline == 2, timeline
        promoted = read_state(standby, w)
        assert promoted == final, (
            f"promoted (timeline {timeline}): {promoted.figures(pre)} != old primary: {final.figures(pre)}"
        )
        report(f"promoted primary (timeline {timeline}): {promoted.figures(pre)}")

        # -- the promoted node takes writes; the replays stay replays. The Run is terminal now, so the
        # same cancellation command answers already_terminal (decision 0000 (ADR-0118 §6)), with the same intent. ---
        with standby.connect("ql_runtime") as rt:
            readmitted = call(
                rt,
                "ql_api.request_admission_v1(%s, %s, 'run.stop', %s, %s)",
                (w.user_token_digest, w.project, CANCEL_ROUTE, "req-cancel-2"),
            )
        assert readmitted["decision"] == "allow" and readmitted["auditId"], readmitted
        replay_promoted = cancel_once(standby, command, kill_after_commit=False)
        assert replay_promoted["status"] == "already_terminal", replay_promoted
        assert replay_promoted["cancelRequestedAtMs"] == accepted["cancelRequestedAtMs"], replay_promoted
        rerun_promoted = converge_once(standby, kill_after_commit=False)
        assert (rerun_promoted["scanned"], rerun_promoted["converged"]) == (0, 0), rerun_promoted
        with standby.connect() as conn:
            audits = one(conn, "select count(*) from ql.security_audit where request_id = 'req-cancel-2'")
        assert audits == 1
        after_writes = read_state(standby, w)
        assert after_writes == final, after_writes.figures(pre)
        report(
            f"promoted node writes: admission audit row committed; cancellation replay -> "
            f"{replay_promoted['status']}; convergence rerun -> scanned {rerun_promoted['scanned']}; "
            f"run unchanged: {after_writes.figures(pre)}"
        )
        record_property(
            "failover_figures",
            f"version {final.version} (+{final.version - pre.version}), "
            f"event_sequence {final.event_sequence} (+{final.event_sequence - pre.event_sequence}), "
            f"events {len(final.events)} (+{len(final.events) - len(pre.events)}), "
            f"dedupe keys {final.dedupe_keys}, duplicates 0, timeline {timeline}",
        )

        standby_cluster.stop()
        for root in (primary_root, standby_root):
            assert processes_under(root) == [], f"processes left in {root}"
    finally:
        if standby_cluster is not None:
            standby_cluster.stop()
        primary_cluster.stop()
        print("\n".join(["", "failover figures:", *figures]))
