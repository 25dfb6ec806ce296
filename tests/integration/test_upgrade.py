"""Upgrading a live system from the release @v0.1.0 to HEAD and rolling back (docs/operations.md, Upgrading):
on a database deployed `--to @v0.1.0`, a real Worker process talking to the real shell over TLS 1.3 mTLS holds
two Runs (one of them cancelled by a user during the deploy), a third waits queued behind them and a fourth
is queued with a cancel intent. `sqitch deploy` to HEAD replaces the reworked ql_api.subject_create_v1 while
they are live; every Run ends as it would have without the upgrade, `sqitch verify` passes and the function
refuses the empty token's digest. `sqitch revert --to @v0.1.0` then restores the tagged definition (its body,
comment and privileges), verifies, and the same Worker runs a new Run to the end (the release lacks the output
route's function, so the HEAD shell answers the Worker's output 503: output never holds a completion back).

Touches: one database of the session cluster (created here, deployed to @v0.1.0, dropped), the in-process
shell on TLS 1.3 loopback, one Worker process and its task processes (this process is their child subreaper
meanwhile), the test's tmp_path.
"""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import time
from collections.abc import Iterator
from typing import Any, Final

import pytest

from qinglong import db
from qinglong.devdb import Cluster
from qinglong.shell import app
from qinglong.shell.routes import ROUTES, Args, Call
from qinglong.wire.codec import KIB, MAX_SAFE_INTEGER
from qinglong.wire.common import AttemptFence
from qinglong.wire.fields import Int, Uuid, wire
from qinglong.wire.lease_control import LEASE_CONTROL_SCHEMA, LeaseControlRequest
from tests.conftest import Database, fresh_database
from tests.integration.shell.conftest import user_call, user_http
from tests.integration.worker.conftest import ENDED_RUN, Rig, child_subreaper, poll, read_journal
from tests.integration.worker.conftest import pki as pki  # the shell's session PKI, as the Worker tests use it
from tests.integration.worker.conftest import rig as rig  # the shell + Worker rig, here over the database below

pytestmark = pytest.mark.db

RELEASE: Final = "@v0.1.0"
REWORKED: Final = "ql_api/subject_create_v1"
CANCEL: Final = "qinglong/run-cancellation@v1"
EMPTY_TOKEN_DIGEST: Final = bytes.fromhex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
TAGGED: Final = db.SCRIPTS / "deploy" / f"{REWORKED}@{RELEASE[1:]}.sql"
HEAD: Final = db.SCRIPTS / "deploy" / f"{REWORKED}.sql"


@pytest.fixture
def database(cluster: Cluster) -> Iterator[Database]:
    """Overrides the per-test clone of the HEAD template: a fresh database deployed to the release only."""
    with fresh_database(cluster, deploy_to=RELEASE) as made:
        yield made


async def sqitch(rig: Rig, command: str, *args: str) -> str:
    """`sqitch <command> <args> <target>` without blocking the loop that serves the shell; its output."""
    target = rig.database.cluster.sqitch_target(rig.database.name)
    proc = await asyncio.create_subprocess_exec(
        *db.sqitch(command, *args, target), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, f"sqitch {command} {' '.join(args)} failed:\n{text}"
    return text


def dollar_body(sql: str) -> str:
    """The text between a routine's $$ quotes (what pg_proc.prosrc holds)."""
    return sql.split("$$", 2)[1]


def definition(rig: Rig) -> tuple[str, str, bool, bool]:
    """(prosrc, comment, ql_runtime may execute, PUBLIC may execute) of the deployed subject_create_v1."""
    sig = "ql_api.subject_create_v1(text, text, bytea)"
    row = rig.rows(
        "select p.prosrc, pg_catalog.obj_description(p.oid, 'pg_proc'),"
        " pg_catalog.has_function_privilege('ql_runtime', p.oid, 'execute'),"
        " pg_catalog.has_function_privilege('public', p.oid, 'execute')"
        " from pg_catalog.pg_proc p where p.oid = %s::regprocedure",
        (sig,),
    )
    assert len(row) == 1, row
    prosrc, comment, runtime, public = row[0]
    return str(prosrc), str(comment), bool(runtime), bool(public)


def tagged_comment() -> str:
    """The comment the tagged deploy copy sets (one quoted literal after `is`)."""
    return TAGGED.read_text().split(" is\n'", 1)[1].split("';\n", 1)[0].replace("''", "'")


def create_with_empty_token(rig: Rig) -> dict[str, object]:
    """subject_create_v1 with the empty token's digest, as a DBA, rolled back whatever it answers."""
    with rig.conn.transaction(force_rollback=True):
        answer = rig.one("select ql_api.subject_create_v1('user', 'nobody', %s)", (EMPTY_TOKEN_DIGEST,))
    assert isinstance(answer, dict)
    return answer


def registry(rig: Rig) -> list[str]:
    return [str(r[0]) for r in rig.rows("select change from sqitch.changes where change = %s", (REWORKED,))]


async def cancel(rig: Rig, run: str, mutation: str) -> None:
    assert rig.served.shell is not None
    async with user_http(rig.pki) as http:
        reply = await user_call(
            http,
            rig.served.shell,
            "POST",
            f"/api/v3/projects/{rig.project}/runs/{run}/cancellation",
            token=rig.operator.token,
            body={"schema": CANCEL, "mutationId": mutation},
        )
    assert reply.status == 202 and reply.json()["status"] == "accepted", reply


@pytest.fixture
def release_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shell as the release calls the database where HEAD's shell calls a function the release lacks: the
    activation route on ql_api.attempt_activation_v1 (HEAD's calls _v2, decision 0025), and lease control on
    ql_api.attempt_lease_control_v1 with the release's body, which refuses `running` as an unknown field (HEAD's
    Worker then sends its running ACK on its own, decision 0031). The documented order deploys the database under
    the running shells of the release, then upgrades them; this test has one shell (HEAD's code) for both, so it
    answers the Worker as the release's would. Both v1 functions stay at HEAD, so they serve across the deploy and
    after the rollback alike."""

    by_name: dict[str, Any] = {r.name: r for r in ROUTES}  # each its own RouteOf[request]
    activation, lease = by_name["worker.activation"], by_name["worker.lease_control"]

    def activation_args(c: Call, b: Any) -> Args:
        args = dict(activation.args(c, b))
        del args["p_error_message"]
        return args

    def lease_args(c: Call, b: ReleaseLeaseControlRequest) -> Args:
        args = dict(lease.args(c, LeaseControlRequest.from_obj(b.to_obj())))  # HEAD's arguments from HEAD's body
        del args["p_running"]
        return args

    release = {
        activation.name: dataclasses.replace(activation, function="attempt_activation_v1", args=activation_args),
        lease.name: dataclasses.replace(
            lease, function="attempt_lease_control_v1", request=lambda match: ReleaseLeaseControlRequest,
            args=lease_args,
        ),
    }  # fmt: skip
    monkeypatch.setattr(app, "ROUTES", tuple(release.get(r.name, r) for r in ROUTES))


class ReleaseLeaseControlRequest(AttemptFence):
    """The release's lease-control body: no `running` (a body with it is refused wire.unknown_field)."""

    SCHEMA = LEASE_CONTROL_SCHEMA
    CAP = 8 * KIB

    offer_id: str = wire(Uuid())
    expected_version: int = wire(Int(1, MAX_SAFE_INTEGER - 1))


async def test_a_live_system_upgrades_from_the_release_to_head_and_rolls_back(release_shell: None, rig: Rig) -> None:
    started = time.monotonic()
    # At the release: one instance of the reworked change, and it still takes the empty token's digest.
    assert registry(rig) == [REWORKED]
    assert create_with_empty_token(rig)["status"] == "created"
    assert definition(rig)[0] == dollar_body(TAGGED.read_text())

    rig.set_lease_ttl(3000)
    # The Run meant to span the deploy runs until the test lets it end (after the deploy and some renewals),
    # not for a fixed time that would have to outlast the slowest deploy.
    release = rig.root / "across.go"
    across_script = f"while [ ! -e {release} ]; do sleep 0.1; done; echo across the upgrade"
    across = rig.add_run({"argv": ["sh", "-c", across_script], "timeoutMs": 60000})
    stopped = rig.add_run({"argv": ["sleep", "60"], "timeoutMs": 60000})
    waiting = rig.add_run({"argv": ["sh", "-c", "echo after the upgrade"]})
    unserved = rig.add_run({"argv": ["sh", "-c", "echo never"]})
    await cancel(rig, unserved, "cancel-queued")  # an intent on a queued Run: never offered, left to convergence
    config = rig.write_config(tick_seconds=0.3)
    two = config.read_text().replace("capacity = 1\n", "capacity = 2\n")  # both Runs held at once
    assert "capacity = 2\n" in two
    config.write_text(two)

    with child_subreaper():
        worker = rig.start_worker_process(config)

        def attempt_running(run: str) -> bool:
            attempts = rig.attempts(run)
            return bool(attempts) and attempts[-1]["status"] == "running"

        await poll(lambda: attempt_running(across) and attempt_running(stopped), within=20)
        assert rig.run_status(waiting) == rig.run_status(unserved) == "queued"
        lease_before = rig.lease_version(across)

        # Deploy HEAD while they are live; a user cancels the second running Run meanwhile.
        deploy = asyncio.create_task(sqitch(rig, "deploy"))
        await cancel(rig, stopped, "cancel-running")
        out = await deploy
        assert f"+ {REWORKED}" in out, out
        assert rig.run_status(across) == "running", "the deploy outlived the Run meant to span it"
        assert registry(rig) == [REWORKED, REWORKED]
        assert definition(rig)[0] == dollar_body(HEAD.read_text())

        rig.conn.execute("call ql_api.converge()")  # what pg_cron runs every minute
        # Renewals go on across and after the deploy (a TTL of 3 s: had they stopped, the Lease would have
        # expired and the Worker would have stopped the task); then the task may end.
        await poll(lambda: rig.lease_version(across) > lease_before + 3, within=20, every=0.1)
        assert rig.run_status(across) == "running", worker.output()
        release.touch()
        await poll(lambda: all(rig.run_status(r) in ENDED_RUN for r in (across, stopped, waiting)), within=45)
        assert rig.lease_version(across) > lease_before + 3, "renewals stopped across the deploy"
        assert [rig.run_status(r) for r in (across, stopped, waiting, unserved)] == [
            "succeeded",
            "cancelled",
            "succeeded",
            "cancelled",
        ], worker.output()
        assert [t for t, _, _ in rig.events(stopped)][-3:] == [
            "run.cancel_requested",
            "attempt.cancelled",
            "run.cancelled",
        ]
        assert rig.events(stopped)[-3][1:] == ("user", str(rig.operator.id))
        assert rig.events(unserved)[-1][:2] == ("run.cancelled", "reconciler")
        assert rig.attempts(unserved) == []
        await poll(lambda: [r.state for r in read_journal(rig.journal_path)] == ["completed"] * 3, within=10)

        # HEAD verifies, and the reworked function refuses the empty token's digest, writing nothing.
        await sqitch(rig, "verify")
        subjects = rig.one("select count(*) from ql.subjects")
        assert create_with_empty_token(rig) == {"status": "invalid", "reason": "empty_token"}
        assert rig.one("select count(*) from ql.subjects where token_digest = %s", (EMPTY_TOKEN_DIGEST,)) == 0
        assert rig.one("select count(*) from ql.subjects") == subjects

        # Roll back to the release while the shell and the Worker keep running.
        out = await sqitch(rig, "revert", "-y", "--to", RELEASE)
        assert f"- {REWORKED}" in out, out
        await sqitch(rig, "verify")
        assert registry(rig) == [REWORKED]
        prosrc, comment, runtime, public = definition(rig)
        assert prosrc == dollar_body(TAGGED.read_text()), "the tagged body was not restored"
        assert comment == tagged_comment()
        assert (runtime, public) == (False, False)
        assert create_with_empty_token(rig)["status"] == "created"

        after = rig.add_run({"argv": ["sh", "-c", "echo after the rollback"]})
        await poll(lambda: rig.run_status(after) in ENDED_RUN, within=15)
        assert rig.run_status(after) == "succeeded", worker.output()
        assert worker.popen.poll() is None, worker.output()
        worker.popen.send_signal(signal.SIGTERM)
        assert await worker.wait(10) == 0, worker.output()
    assert time.monotonic() - started < 60
