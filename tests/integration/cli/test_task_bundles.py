"""`qinglong task create --bundle --sign` as an operator runs it (child processes; the helpers are test_cli's): a
folder is packed, uploaded once (the same folder again sends no chunk) and pinned in the plan; the plan stored is
exactly the one signed, for the Project it is in, with the key named by --sign or QINGLONG_PLAN_KEY; `task show`
names the signing key and lists the bundle's files. A folder holding a symlink, a missing folder, a key that is not
one, and a plan that is not one are each one line, exit 2, with nothing changed in the database.
Touches: the session cluster (a fresh database per test), temporary folders (the scripts, the keys).
"""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from qinglong.wire.offer import Plan, PlanSignature
from qinglong.wire.signing import load_trusted, verify, write_private_key
from tests.conftest import Database
from tests.integration.cli.test_cli import a_project, cli, done, ql_text, refused

pytestmark = pytest.mark.db


@pytest.fixture
def scripts(tmp_path: Path) -> Path:
    folder = tmp_path / "scripts"
    (folder / "lib").mkdir(parents=True)
    (folder / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (folder / "run.sh").chmod(0o755)
    (folder / "lib" / "data.txt").write_text("data")
    return folder


def stored(dsn: str, task_id: str) -> tuple[dict[str, object], dict[str, object] | None, str]:
    """The task's current revision: its plan, its signature and its Project."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "select r.plan_json, r.plan_signature, r.project_id::text from ql.task_execution_revisions r"
            " join ql.tasks t on t.current_revision_id = r.id where t.id = %s",
            (task_id,),
        ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def test_a_folder_ships_once_signed_and_task_show_lists_it(database: Database, scripts: Path, tmp_path: Path) -> None:
    dsn = database.dsn()
    project = a_project(dsn, "cli-bundles")
    keys = write_private_key(tmp_path / "ops.key")
    create = ("task", "create", "--dsn", dsn, "--project", project, "--bundle", str(scripts), "--cwd", ".", "--json")
    first = json.loads(done(cli(*create, "--name", "a", "--sign", str(keys.private), "--", "./run.sh"), r"(?s).*")[0])
    plan, signature, owner = stored(dsn, first["taskId"])
    assert plan == {"argv": ["./run.sh"], "cwd": ".", "bundle": plan["bundle"]} and owner == project
    assert signature is not None
    verify(load_trusted([keys.public]), project, Plan.from_obj(plan), PlanSignature.from_obj(signature))
    with psycopg.connect(dsn) as conn:
        chunks = conn.execute("select count(*), max(xmin::text) from ql.bundle_chunks").fetchone()
    # The same folder again, the key from QINGLONG_PLAN_KEY: the bundle is not sent again.
    second = cli(*create, "--name", "b", "--", "./run.sh", env={"QINGLONG_PLAN_KEY": str(keys.private)})
    b_plan, b_signature, _ = stored(dsn, json.loads(done(second, r"(?s).*")[0])["taskId"])
    assert b_plan["bundle"] == plan["bundle"] and b_signature is not None
    with psycopg.connect(dsn) as conn:
        assert conn.execute("select count(*), max(xmin::text) from ql.bundle_chunks").fetchone() == chunks
    shown = cli("task", "show", "--dsn", dsn, "--project", project, "a")
    assert shown.code == 0, shown
    key_id = signature["keyId"]
    assert f"signed by   {key_id}" in shown.stdout and f"bundle      {plan['bundle']}" in shown.stdout
    for line in ("  dir  lib/", "  644          4 lib/data.txt", "  755         18 run.sh"):
        assert line in shown.stdout.splitlines(), shown.stdout


def test_a_bad_bundle_key_or_plan_is_one_line_and_changes_nothing(
    database: Database, scripts: Path, tmp_path: Path
) -> None:
    dsn = database.dsn()
    project = a_project(dsn, "cli-bundles-bad")
    (scripts / "link").symlink_to("/etc/passwd")
    not_a_key = tmp_path / "not.key"
    not_a_key.write_text("hello")
    not_a_key.chmod(0o600)
    before = ql_text(dsn)
    create = ("task", "create", "--dsn", dsn, "--project", project, "--name", "t")
    refused(cli(*create, "--bundle", str(scripts), "--", "true"), 2, "--bundle", "bundle.source_link")
    refused(cli(*create, "--bundle", str(tmp_path / "absent"), "--", "true"), 2, "--bundle", "bundle.source_missing")
    refused(cli(*create, "--sign", str(not_a_key), "--", "true"), 2, "--sign", str(not_a_key))
    refused(cli(*create, "--sign", str(tmp_path / "absent.key"), "--", "true"), 2, "--sign")
    refused(cli(*create, "--cwd", "x" * 5000, "--", "true"), 2, "the plan: cwd")
    assert ql_text(dsn) == before
