"""The user API's task commands, run as a person runs them (child processes; the helpers are test_cli's): `task
revise` makes a task and a new revision through the shell (`--sign` signs the plan for the Project, and a Worker's
check accepts exactly that plan), `task deactivate` / `activate` set its status, `task reschedule` sets a 6-field
schedule and clears it, `task preview` prints the next fire times; an operator is refused (403 denied, one line,
nothing changed), and a bad expression is the refusal a set answers.

Touches: the session cluster (a fresh database per test), temporary folders (token and key files), the in-process
shell on loopback, child processes.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import psycopg
import pytest

from qinglong.wire.offer import Plan, PlanSignature
from qinglong.wire.signing import load_private_key, verify, write_private_key
from tests.conftest import Database
from tests.integration.cli.test_cli import _api_args, _token_file, acli, done, refused
from tests.integration.db.factories import make_user, set_role
from tests.integration.shell import conftest as shell_conftest
from tests.integration.shell.conftest import Pki, Seed, Shell, ql_image

pki = shell_conftest.pki
seed = shell_conftest.seed
shell = shell_conftest.shell

pytestmark = pytest.mark.db


def _admin_token(database: Database, project: str) -> str:
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        admin = make_user(conn)
        set_role(conn, uuid.UUID(project), admin, "admin", True)
    return admin.token


def _revision(database: Database, task: str) -> tuple[dict[str, object], dict[str, object] | None]:
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        row = conn.execute(
            "select r.plan_json, r.plan_signature from ql.tasks t join ql.task_execution_revisions r"
            " on r.id = t.current_revision_id where t.id = %s",
            (task,),
        ).fetchone()
    assert row is not None
    return row[0], row[1]


async def test_an_admin_revises_signs_disables_and_schedules_a_task(
    shell: Shell, seed: Seed, pki: Pki, database: Database, tmp_path: Path
) -> None:
    api = _api_args(shell, pki, _token_file(tmp_path, "admin", _admin_token(database, seed.project_p)), "project-p")
    out = await acli(
        "task", "revise", *api, "--name", "nightly", "--timeout-ms", "5000", "--env", "A=1", "--", "echo", "hi"
    )
    made = done(out, r"task nightly: created ([0-9a-f-]{36}) \(revision ([0-9a-f-]{36}), unsigned\)\n")
    plan, signature = _revision(database, made[1])
    assert (plan, signature) == ({"argv": ["echo", "hi"], "env": {"A": "1"}, "timeoutMs": 5000}, None)

    keys = write_private_key(tmp_path / "ops.key")
    out = await acli("task", "revise", *api, "--name", "nightly", "--sign", str(keys.private), "--", "echo", "signed")
    done(out, rf"task nightly: revised {made[1]} \(revision [0-9a-f-]{{36}}, signed\)\n")
    plan, signature = _revision(database, made[1])
    assert plan == {"argv": ["echo", "signed"]} and signature is not None
    private = load_private_key(keys.private)
    trusted = {str(signature["keyId"]): private.public_key()}  # a Worker trusting the key runs exactly this plan
    verify(trusted, seed.project_p, Plan.from_obj(plan), PlanSignature.from_obj(signature))

    done(await acli("task", "deactivate", *api, "nightly"), rf"task nightly {made[1]}: disabled\n")
    done(await acli("task", "deactivate", *api, "nightly"), rf"task nightly {made[1]}: disabled \(already\)\n")
    done(await acli("task", "activate", *api, "nightly"), rf"task nightly {made[1]}: enabled\n")

    out = await acli("task", "reschedule", *api, "nightly", "--cron", "*/10 * * * * *", "--timezone", "Asia/Shanghai")
    done(out, r"task nightly: schedule set: '\*/10 \* \* \* \* \*' Asia/Shanghai, overlap skip\n")
    done(await acli("task", "reschedule", *api, "nightly", "--clear"), r"task nightly: schedule cleared\n")

    shown = await acli("task", "preview", *api, "--cron", "0 9 * * *", "--timezone", "Asia/Shanghai", "--count", "3")
    lines = done(shown, r"'0 9 \* \* \*' Asia/Shanghai:\n(  next  \S+T09:00:00\+08:00\n){3}")[0].splitlines()
    assert len(set(lines)) == 4, lines
    preview = json.loads((await acli("task", "preview", *api, "--cron", "@daily", "--json")).stdout)
    assert preview["status"] == "previewed" and len(preview["fires"]) == 5


async def test_an_operator_is_refused_and_a_bad_expression_is_named(
    shell: Shell, seed: Seed, pki: Pki, database: Database, tmp_path: Path
) -> None:
    api = _api_args(shell, pki, _token_file(tmp_path, "operator", seed.operator.token), "project-p")
    before = await ql_image(database.dsn())
    refused(await acli("task", "revise", *api, "--name", "nightly", "--", "rm", "-rf", "/"), 2, "403", "denied")
    refused(await acli("task", "deactivate", *api, "nightly"), 2, "403", "denied")
    refused(await acli("task", "reschedule", *api, "nightly", "--cron", "* * * * *"), 2, "403", "denied")
    refused(await acli("task", "preview", *api, "--cron", "61 * * * *"), 2, "invalid.cron")
    after = await ql_image(database.dsn())
    assert {k: v for k, v in after.items() if k != "security_audit"} == {
        k: v for k, v in before.items() if k != "security_audit"
    }
