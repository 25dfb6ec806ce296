"""Each function's sqitch deploy script is a frozen copy of its db/functions file (docs/architecture.md §2):
editing a function without re-running scripts/sync_functions.py fails here. A reworked change (listed in
the plan again after a tag) keeps its earlier instance's frozen <change>@<tag>.sql scripts, and its revert
restores the tagged body; a never-reworked function's revert drops it. Touches: copies of the sqitch project
and of db/functions in tmp_path (the repository's files are only read)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from qinglong.db import PROJECT

REPO = Path(__file__).resolve().parents[2]
FUNCTIONS = REPO / "db" / "functions"
SYNC = REPO / "scripts" / "sync_functions.py"
REWORKED = "ql_api/subject_create_v1"  # reworked after @v0.1.0: it refuses the empty token's digest


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
        suffix = next((t for t in tags if (project / "deploy" / f"{name}{t}.sql").is_file()), None)
        found.setdefault(name, []).append(suffix)
    return found


def function_changes() -> set[str]:
    return {p.relative_to(FUNCTIONS).with_suffix("").as_posix() for p in FUNCTIONS.rglob("*.sql")}


def tagged_body(project: Path, change: str, suffix: str) -> str:
    """The function text of a frozen deploy copy: between its header and `commit;`."""
    text = (project / "deploy" / f"{change}{suffix}.sql").read_text()
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
                path = PROJECT / folder / f"{change}{suffix}.sql"
                assert path.is_file(), f"{folder} script of {change}{suffix} missing"


def test_the_first_release_is_tagged_and_the_reworked_change_follows_it() -> None:
    entries = plan_entries()
    assert "@v0.1.0" in entries
    assert entries.count(REWORKED) == 2
    assert entries.index(REWORKED) < entries.index("@v0.1.0") < len(entries) - 1 - entries[::-1].index(REWORKED)
    assert instances()[REWORKED] == ["@v0.1.0", ""]


def test_a_reworked_revert_restores_the_tagged_body_and_never_drops() -> None:
    reworked = {c for c, s in instances().items() if len(s) > 1 and c in function_changes()}
    assert REWORKED in reworked
    for change in reworked:
        revert = (PROJECT / "revert" / f"{change}.sql").read_text()
        previous = tagged_body(PROJECT, change, instances()[change][-2] or "")
        current = (FUNCTIONS / f"{change}.sql").read_text().rstrip()
        assert "create or replace" in previous
        assert previous in revert, f"{change}: its revert does not restore the tagged body"
        assert current not in revert, f"{change}: its revert holds the new body"
        assert previous != current, f"{change}: reworked without a change"
        assert not re.search(r"^drop ", revert, re.M), f"{change}: same signature, so nothing is dropped"
        assert re.search(
            r"^revoke all on (function|procedure) .* from public, ql_runtime, ql_scheduler, ql_readonly;$", revert, re.M
        )
    assert "empty_token" not in (PROJECT / "revert" / f"{REWORKED}.sql").read_text()


def test_a_never_reworked_function_is_dropped_by_its_revert() -> None:
    found = instances()
    once = sorted(c for c in function_changes() if len(found[c]) == 1)
    assert len(once) > 20
    for change in once:
        signature = re.search(r"^-- signature: (\S.*)$", (FUNCTIONS / f"{change}.sql").read_text(), re.M)
        assert signature is not None, change
        revert = (PROJECT / "revert" / f"{change}.sql").read_text()
        assert re.search(rf"^drop (function|procedure) {re.escape(signature[1].strip())};$", revert, re.M), change


# -- copies of the project: what sync does with frozen copies and changed signatures ----------------------


@pytest.fixture
def copies(tmp_path: Path) -> tuple[Path, Path]:
    project, functions = tmp_path / "project", tmp_path / "functions"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns("__pycache__", "*.py", "py.typed"))
    shutil.copytree(FUNCTIONS, functions)
    out = sync("--check", "--project", project, "--functions", functions)
    assert out.returncode == 0, out.stderr
    return project, functions


@pytest.mark.parametrize("folder", ["deploy", "revert", "verify"])
def test_a_missing_frozen_copy_is_reported_and_never_written(copies: tuple[Path, Path], folder: str) -> None:
    project, functions = copies
    frozen = project / folder / f"{REWORKED}@v0.1.0.sql"
    frozen.unlink()
    checked = sync("--check", "--project", project, "--functions", functions)
    assert checked.returncode == 1
    assert f"{folder}/{REWORKED}@v0.1.0.sql" in checked.stderr or f"{folder}/{REWORKED}@<v0.1.0>" in checked.stderr
    written = sync("--project", project, "--functions", functions)
    assert written.returncode == 1, "sync cannot make a frozen copy up"
    assert not frozen.exists()


def test_a_frozen_deploy_copy_edited_by_hand_is_refused(copies: tuple[Path, Path]) -> None:
    project, functions = copies
    frozen = project / "deploy" / f"{REWORKED}@v0.1.0.sql"
    frozen.write_text(frozen.read_text().replace("\ncommit;\n", "\n"))
    before = (project / "revert" / f"{REWORKED}.sql").read_text()
    out = sync("--project", project, "--functions", functions)
    assert out.returncode != 0 and "not a deploy copy written by this script" in out.stderr, out.stderr
    assert (project / "revert" / f"{REWORKED}.sql").read_text() == before


def test_a_drifted_reworked_revert_is_reported_and_rewritten(copies: tuple[Path, Path]) -> None:
    project, functions = copies
    revert = project / "revert" / f"{REWORKED}.sql"
    good = revert.read_text()
    revert.write_text(
        f"-- Revert qinglong:{REWORKED} from pg\ndrop function ql_api.subject_create_v1(text, text, bytea);\n"
    )
    checked = sync("--check", "--project", project, "--functions", functions)
    assert checked.returncode == 1 and f"revert/{REWORKED}.sql" in checked.stderr, checked.stderr
    assert sync("--project", project, "--functions", functions).returncode == 0
    assert revert.read_text() == good


def test_a_changed_signature_is_dropped_before_the_tagged_body_is_restored(copies: tuple[Path, Path]) -> None:
    project, functions = copies
    source = functions / f"{REWORKED}.sql"
    text = source.read_text().replace("(text, text, bytea)", "(text, text, bytea, text)")
    source.write_text(text.replace("p_token_digest bytea)", "p_token_digest bytea, p_note text)"))
    assert sync("--check", "--project", project, "--functions", functions).returncode == 1
    assert sync("--project", project, "--functions", functions).returncode == 0
    revert = (project / "revert" / f"{REWORKED}.sql").read_text()
    drop = "drop function ql_api.subject_create_v1(text, text, bytea, text);"
    previous = tagged_body(project, REWORKED, "@v0.1.0")
    assert drop in revert and previous in revert
    assert revert.index(drop) < revert.index(previous)
    assert "revoke all on function ql_api.subject_create_v1(text, text, bytea, text)" not in revert
    assert "(text, text, bytea, text)" in (project / "deploy" / f"{REWORKED}.sql").read_text()
    assert sync("--check", "--project", project, "--functions", functions).returncode == 0
