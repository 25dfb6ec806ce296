"""The CLI's notification commands through the real user API (the in-process shell; children as an operator runs
them): an operator adds a webhook rule naming a Project secret (created, then unchanged, then updated), every role
lists the rules and the delivery history, a viewer is refused (403) with nothing changed, a URL carrying a credential
and a secret the Project does not have are one-line refusals, and remove drops the rule (a second remove is a
refusal). Admission comes before the body, as on every user route. The rule holds the secret's name only.

Touches: the session cluster (a fresh database per test), temporary folders (tokens, the value), the in-process
shell on loopback, child processes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Database
from tests.integration.cli.test_cli import _api_args, _token_file, acli, done, refused, rows
from tests.integration.cli.test_secret_cli import fed, owner_api
from tests.integration.shell import conftest as shell_conftest
from tests.integration.shell.conftest import Pki, Seed, Shell

pki = shell_conftest.pki
seed = shell_conftest.seed
shell = shell_conftest.shell

URL = "https://hooks.example.com/qinglong"


def rule_rows(dsn: str) -> list[tuple[Any, ...]]:
    return rows(dsn, "select r::text from ql.notify_rules r order by r.id")


@pytest.mark.db
async def test_rules_are_added_listed_and_removed_by_name_and_refused_as_the_roles_say(
    shell: Shell, seed: Seed, pki: Pki, database: Database, tmp_path: Path
) -> None:
    dsn = database.dsn()
    owner = owner_api(shell, pki, dsn, seed, tmp_path)
    done((await fed("secret", "set", *owner, "HOOK_KEY", stdin=b"hook-key-value-0123456789"))[0], r".*\n")
    operator = _api_args(shell, pki, _token_file(tmp_path, "operator", seed.operator.token), "project-p")
    viewer = _api_args(shell, pki, _token_file(tmp_path, "viewer", seed.viewer.token), "project-p")
    add = ("notify", "rule", "add")

    done(await acli(*add, *operator, "ops", "--events", "run.failed,run.timed_out", "--url", URL,
                    "--secret", "HOOK_KEY"), r"rule ops: created\n")  # fmt: skip
    done(await acli(*add, *operator, "ops", "--events", "run.failed,run.timed_out", "--url", URL,
                    "--secret", "HOOK_KEY"), r"rule ops: unchanged\n")  # fmt: skip
    done(await acli(*add, *operator, "ops", "--events", "run.failed", "--url", URL, "--secret", "HOOK_KEY"),
         r"rule ops: updated\n")  # fmt: skip
    listed = json.loads(done(await acli("notify", "rule", "list", *viewer, "--json"), r"(?s)\{.*\}\n")[0])
    assert [(r["name"], r["events"], r["secretName"], r["url"]) for r in listed["rules"]] == [
        ("ops", ["run.failed"], "HOOK_KEY", URL)
    ]
    table = done(await acli("notify", "rule", "list", *viewer), r"(?s)NAME +EVENTS.*\n")[0]
    assert "ops" in table and "hook-key-value" not in table
    history = json.loads(done(await acli("notify", "deliveries", *viewer, "--json"), r"(?s)\{.*\}\n")[0])
    assert history["notifications"] == [] and history["schema"] == "qinglong/notify@v1"

    before = rule_rows(dsn)
    denied = "refused (403 denied)"
    assert denied in refused(await acli(*add, *viewer, "ops", "--events", "run.lost", "--url", URL,
                                        "--secret", "HOOK_KEY"), 2)  # fmt: skip
    assert denied in refused(await acli("notify", "rule", "remove", *viewer, "ops"), 2)
    assert "invalid.url" in refused(await acli(*add, *operator, "leaky", "--events", "run.failed",
                                               "--url", URL + "?token=abc", "--secret", "HOOK_KEY"), 2)  # fmt: skip
    assert "no secret NOPE" in refused(await acli(*add, *operator, "other", "--events", "run.failed", "--url", URL,
                                                  "--secret", "NOPE"), 2)  # fmt: skip
    refused(await acli(*add, *operator, "Bad Name", "--events", "run.failed", "--url", URL, "--secret", "HOOK_KEY"), 2)
    refused(await acli(*add, *operator, "x", "--events", "run.exploded", "--url", URL, "--secret", "HOOK_KEY"), 2)
    assert rule_rows(dsn) == before, "no refused command changed a rule"

    done(await acli("notify", "rule", "remove", *operator, "ops"), r"rule ops: removed \(0 pending .*\)\n")
    assert "no rule ops" in refused(await acli("notify", "rule", "remove", *operator, "ops"), 2)
    assert json.loads(done(await acli("notify", "rule", "list", *viewer, "--json"), r"(?s).*\n")[0])["rules"] == []
