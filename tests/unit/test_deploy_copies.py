"""Each sqitch deploy script is a frozen copy of its db/functions or db/schema file (docs/architecture.md §2):
editing one without re-running scripts/sync_functions.py fails here. A reworked change (listed in
the plan again after a tag) keeps its earlier instance's frozen <change>@<tag>.sql scripts, and its revert
restores the tagged body; a never-reworked function's revert drops it. Touches: copies of the sqitch project
and of db/functions in tmp_path (the repository's files are only read)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from qinglong.db import PROJECT, SCRIPTS

REPO = Path(__file__).resolve().parents[2]
FUNCTIONS = REPO / "db" / "functions"
SCHEMA = REPO / "db" / "schema"
SYNC = REPO / "scripts" / "sync_functions.py"
REWORKED = "ql_api/subject_create_v1"  # reworked after @v0.1.0: it refuses the empty token's digest


def _sync_module() -> object:
    spec = importlib.util.spec_from_file_location("sync_functions", SYNC)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


_SYNC = _sync_module()
signature_of: Callable[[str, Path], tuple[str, str]] = getattr(_SYNC, "signature")  # noqa: B009
grants_of: Callable[[str, str], tuple[str, ...]] = getattr(_SYNC, "grants")  # noqa: B009


def sync(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, SYNC, *map(str, args)], capture_output=True, text=True, check=False)


def plan_entries(project: Path = PROJECT) -> list[str]:
    """Change names and tags ("@name") in plan order."""
    lines = (project / "sqitch.plan").read_text().splitlines()
    return [line.split()[0] for line in lines if line.strip() and not line.startswith(("%", "#"))]


def instances(project: Path = PROJECT) -> dict[str, list[str | None]]:
    """Per change, the file suffix of each instance, oldest first: "@<tag>" for an earlier instance of a
    reworked change (the first tag after it whose deploy copy exists, as sqitch looks it up), "" for the latest."""
    entries = plan_entries(project)
    found: dict[str, list[str | None]] = {}
    for i, name in enumerate(entries):
        if name.startswith("@"):
            continue
        later = [j for j in range(i + 1, len(entries)) if entries[j] == name]
        if not later:
            found.setdefault(name, []).append("")
            continue
        tags = [e for e in entries[i + 1 : later[0]] if e.startswith("@")]
        suffix = next((t for t in tags if (project / "db" / "deploy" / f"{name}{t}.sql").is_file()), None)
        found.setdefault(name, []).append(suffix)
    return found


def function_changes() -> set[str]:
    return {p.relative_to(FUNCTIONS).with_suffix("").as_posix() for p in FUNCTIONS.rglob("*.sql")}


def tagged_body(project: Path, change: str, suffix: str) -> str:
    """The function text of a frozen deploy copy: between its header and `commit;`."""
    text = (project / "db" / "deploy" / f"{change}{suffix}.sql").read_text()
    return text.split("set local role ql_owner;\n\n", 1)[1].rsplit("\n\ncommit;\n", 1)[0]


# -- the repository --------------------------------------------------------------------------------------


def test_deploy_revert_verify_scripts_match_their_function_files() -> None:
    out = sync("--check")
    assert out.returncode == 0, out.stderr


def test_every_function_file_is_a_change_of_the_plan_with_every_instance_scripted() -> None:
    found = instances()
    files = function_changes()
    assert files <= set(found), f"function files missing from sqitch.plan: {sorted(files - set(found))}"
    for change, suffixes in found.items():
        assert suffixes[-1] == "", change
        for suffix in suffixes:
            assert suffix is not None, f"{change}: an earlier instance has no frozen <change>@<tag>.sql copy"
            for folder in ("deploy", "revert", "verify"):
                path = SCRIPTS / folder / f"{change}{suffix}.sql"
                assert path.is_file(), f"{folder} script of {change}{suffix} missing"


def test_the_first_release_is_tagged_and_the_reworked_change_follows_it() -> None:
    entries = plan_entries()
    assert "@v0.1.0" in entries
    assert entries.count(REWORKED) == 2
    assert entries.index(REWORKED) < entries.index("@v0.1.0") < len(entries) - 1 - entries[::-1].index(REWORKED)
    assert instances()[REWORKED] == ["@v0.1.0", ""]


def test_a_reworked_revert_restores_the_tagged_body_and_drops_only_a_changed_signature() -> None:
    reworked = {c for c, s in instances().items() if len(s) > 1 and c in function_changes()}
    assert REWORKED in reworked
    for change in reworked:
        revert = (SCRIPTS / "revert" / f"{change}.sql").read_text()
        previous = tagged_body(PROJECT, change, instances()[change][-2] or "")
        current = (FUNCTIONS / f"{change}.sql").read_text().rstrip()
        assert "create or replace" in previous
        assert previous in revert, f"{change}: its revert does not restore the tagged body"
        assert current not in revert, f"{change}: its revert holds the new body"
        assert previous != current, f"{change}: reworked without a change"
        path = FUNCTIONS / f"{change}.sql"
        now, before = signature_of(current, path)[1], signature_of(previous, path)[1]
        drops = re.findall(r"^drop (?:function|procedure) (.*);$", revert, re.M)
        assert drops == ([] if now == before else [now]), f"{change}: drops {drops}, signature {before} -> {now}"
        assert drops or re.search(  # a routine kept keeps its privileges: every role's goes first
            r"^revoke all on (function|procedure) .* from public, ql_runtime, ql_scheduler, ql_readonly;$", revert, re.M
        )
    assert "empty_token" not in (SCRIPTS / "revert" / f"{REWORKED}.sql").read_text()


def test_a_never_reworked_function_is_dropped_by_its_revert() -> None:
    found = instances()
    once = sorted(c for c in function_changes() if len(found[c]) == 1)
    assert len(once) > 20
    for change in once:
        _, signature = signature_of((FUNCTIONS / f"{change}.sql").read_text(), FUNCTIONS / f"{change}.sql")
        revert = (SCRIPTS / "revert" / f"{change}.sql").read_text()
        assert re.search(rf"^drop (function|procedure) {re.escape(signature)};$", revert, re.M), change


# -- the signature and the grants come from the CREATE and GRANT statements -------------------------------


@pytest.mark.parametrize(
    ("create", "expected"),
    [
        ("create or replace function ql.now_ms()\nreturns bigint", ("function", "ql.now_ms()")),
        (  # defaults (with a comma and a parenthesis inside a literal), comments and mixed case
            "CREATE OR REPLACE FUNCTION ql_api.f(\n  p_a uuid,  -- the (first) one, say\n"
            "  p_b text DEFAULT 'a, b)',\n  p_c integer = 64,\n  p_d uuid default null\n)\nreturns jsonb",
            ("function", "ql_api.f(uuid, text, integer, uuid)"),
        ),
        (  # OUT parameters are no part of a signature; IN, INOUT and VARIADIC are
            "create or replace function ql.g(in p_a bigint, out outcome jsonb, inout p_b bigint,\n"
            "  out run ql.runs, variadic p_rest text[])\nlanguage plpgsql",
            ("function", "ql.g(bigint, bigint, text[])"),
        ),
        (  # arrays, jsonb, composite types, type modifiers, types written with a space, unnamed parameters
            "create or replace function ql.h(p_ids uuid[], p_doc jsonb, p_run ql.runs, p_n numeric(10, 2),\n"
            "  p_at timestamp with time zone, double precision, p_x double precision, uuid)",
            (
                "function",
                "ql.h(uuid[], jsonb, ql.runs, numeric(10, 2), timestamp with time zone, double precision, "
                "double precision, uuid)",
            ),
        ),
        (
            "create or replace procedure ql_api.converge(\n  p_page_size integer default 64,\n"
            "  p_grace_ms bigint default 30000\n)\nlanguage plpgsql",
            ("procedure", "ql_api.converge(integer, bigint)"),
        ),
    ],
)
def test_the_signature_is_the_parameter_list_of_the_create_statement(create: str, expected: tuple[str, str]) -> None:
    assert signature_of(f"-- a header (with parentheses)\n{create}\nas $$ $$;\n", Path("x.sql")) == expected


def test_a_file_without_exactly_one_create_statement_is_refused() -> None:
    with pytest.raises(SystemExit, match="0 'create or replace"):
        signature_of("-- nothing here\n", Path("x.sql"))
    twice = "create or replace function ql.a()\nreturns int;\ncreate or replace function ql.b()\nreturns int;\n"
    with pytest.raises(SystemExit, match="2 'create or replace"):
        signature_of(twice, Path("x.sql"))


def test_the_grants_are_the_roles_of_the_grant_statements_on_the_routine() -> None:
    body = (
        "grant execute on function ql_api.f(uuid, text) to ql_runtime;\n"
        "GRANT EXECUTE ON PROCEDURE ql_api.f(\n  uuid, text\n) TO ql_scheduler, ql_readonly;\n"
        "grant execute on function ql_api.other(uuid) to ql_owner;\n"
        "-- grant execute: ql_owner\n"
    )
    assert grants_of(body, "ql_api.f") == ("ql_runtime", "ql_scheduler", "ql_readonly")
    assert grants_of(body, "ql_api.g") == ()


# -- copies of the project: what sync does with frozen copies and changed signatures ----------------------


@pytest.fixture
def copies(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A sqitch project (plan, conf, db/deploy|revert|verify) and its sources, copied to tmp_path."""
    project, functions, schema = tmp_path / "project", tmp_path / "functions", tmp_path / "schema"
    for name in ("sqitch.plan", "sqitch.conf"):
        (project / "db").mkdir(parents=True, exist_ok=True)
        shutil.copy(PROJECT / name, project / name)
    for folder in ("deploy", "revert", "verify"):
        shutil.copytree(SCRIPTS / folder, project / "db" / folder)
    shutil.copytree(FUNCTIONS, functions)
    shutil.copytree(SCHEMA, schema)
    out = sync("--check", "--project", project, "--functions", functions, "--schema", schema)
    assert out.returncode == 0, out.stderr
    return project / "db", functions, schema


def sync_copies(copies: tuple[Path, Path, Path], *args: str) -> subprocess.CompletedProcess[str]:
    scripts, functions, schema = copies
    return sync(*args, "--project", scripts.parent, "--functions", functions, "--schema", schema)


@pytest.mark.parametrize("folder", ["deploy", "revert", "verify"])
def test_a_missing_frozen_copy_is_reported_and_never_written(copies: tuple[Path, Path, Path], folder: str) -> None:
    scripts = copies[0]
    frozen = scripts / folder / f"{REWORKED}@v0.1.0.sql"
    frozen.unlink()
    checked = sync_copies(copies, "--check")
    assert checked.returncode == 1
    assert f"{folder}/{REWORKED}@v0.1.0.sql" in checked.stderr or f"{folder}/{REWORKED}@<v0.1.0>" in checked.stderr
    written = sync_copies(copies)
    assert written.returncode == 1, "sync cannot make a frozen copy up"
    assert not frozen.exists()


def test_a_frozen_deploy_copy_edited_by_hand_is_refused(copies: tuple[Path, Path, Path]) -> None:
    scripts = copies[0]
    frozen = scripts / "deploy" / f"{REWORKED}@v0.1.0.sql"
    frozen.write_text(frozen.read_text().replace("\ncommit;\n", "\n"))
    before = (scripts / "revert" / f"{REWORKED}.sql").read_text()
    out = sync_copies(copies)
    assert out.returncode != 0 and "not a deploy copy written by this script" in out.stderr, out.stderr
    assert (scripts / "revert" / f"{REWORKED}.sql").read_text() == before


def test_a_drifted_reworked_revert_is_reported_and_rewritten(copies: tuple[Path, Path, Path]) -> None:
    scripts = copies[0]
    revert = scripts / "revert" / f"{REWORKED}.sql"
    good = revert.read_text()
    revert.write_text(
        f"-- Revert qinglong:{REWORKED} from pg\ndrop function ql_api.subject_create_v1(text, text, bytea);\n"
    )
    checked = sync_copies(copies, "--check")
    assert checked.returncode == 1 and f"revert/{REWORKED}.sql" in checked.stderr, checked.stderr
    assert sync_copies(copies).returncode == 0
    assert revert.read_text() == good


def test_a_changed_signature_is_dropped_before_the_tagged_body_is_restored(copies: tuple[Path, Path, Path]) -> None:
    scripts, functions, _ = copies
    source = functions / f"{REWORKED}.sql"
    text = source.read_text().replace("(text, text, bytea)", "(text, text, bytea, text)")
    source.write_text(text.replace("p_token_digest bytea)", "p_token_digest bytea, p_note text)"))
    assert sync_copies(copies, "--check").returncode == 1
    assert sync_copies(copies).returncode == 0
    revert = (scripts / "revert" / f"{REWORKED}.sql").read_text()
    drop = "drop function ql_api.subject_create_v1(text, text, bytea, text);"
    previous = tagged_body(scripts.parent, REWORKED, "@v0.1.0")
    assert drop in revert and previous in revert
    assert revert.index(drop) < revert.index(previous)
    assert "revoke all on function ql_api.subject_create_v1(text, text, bytea, text)" not in revert
    assert "(text, text, bytea, text)" in (scripts / "deploy" / f"{REWORKED}.sql").read_text()
    assert sync_copies(copies, "--check").returncode == 0


def test_a_schema_source_edited_without_sync_is_drift_and_sync_copies_it(copies: tuple[Path, Path, Path]) -> None:
    scripts, _, schema = copies
    source = schema / "ql" / "tenancy.sql"
    source.write_text(source.read_text().replace("-- Projects,", "-- All projects,"))
    checked = sync_copies(copies, "--check")
    assert checked.returncode == 1 and "deploy/ql/tenancy.sql" in checked.stderr, checked.stderr
    assert sync_copies(copies).returncode == 0
    deployed = (scripts / "deploy" / "ql" / "tenancy.sql").read_text()
    assert deployed.startswith("-- Deploy qinglong:ql/tenancy to pg\n-- FROZEN COPY of db/schema/ql/tenancy.sql")
    assert deployed.endswith(source.read_text())
