"""The docs' cross-references hold: every decision record is listed in docs/architecture.md §13 and has the
one header format; every "decision NNNN", every "<doc>.md §N" and every seed-record section cited anywhere
in the repository exists; no citation points at an issue tracker a reader does not have, or at the seed
records themselves (decision 0000 restates them). Touches: nothing (reads the repository's text files)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parents[2]
DOCS: Final = REPO / "docs"
RECORDS: Final = sorted((DOCS / "decisions").glob("[0-9][0-9][0-9][0-9]-*.md"))
SEEDS: Final = DOCS / "decisions" / "0000-seed-records.md"
TEXT: Final = (".md", ".py", ".sql", ".sh", ".toml", ".js", ".html", ".css", ".service", ".conf")
FROZEN: Final = ("db/deploy/", "db/revert/", "db/verify/")  # copies of sources checked elsewhere


def texts() -> dict[str, str]:
    """Every tracked text file's content, by its repository path."""
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return {
        name: (REPO / name).read_text()
        for name in listed.splitlines()
        if name.endswith(TEXT) and not name.startswith(FROZEN) and (REPO / name).is_file()
    }


def numbers() -> set[str]:
    return {p.name[:4] for p in RECORDS}


def sections(doc: Path) -> set[str]:
    return set(re.findall(r"^## (\d+)\. ", doc.read_text(), re.M))


def test_every_record_has_the_header_format_and_is_listed_in_the_architecture() -> None:
    assert len(RECORDS) >= 15
    table = (DOCS / "architecture.md").read_text().split("## 13. Decision records", 1)[1]
    for record in RECORDS:
        lines = record.read_text().splitlines()
        assert re.fullmatch(rf"# {record.name[:4]}: \S.*", lines[0]), f"{record.name}: title {lines[0]!r}"
        assert lines[1] == "" and re.match(r"- Status: \w+ · \d{4}-\d{2}-\d{2}\b", lines[2]), record.name
        assert f"(decisions/{record.name})" in table, f"{record.name} is not listed in architecture.md §13"


def test_every_cited_decision_exists() -> None:
    known, missing = numbers(), []
    for name, text in texts().items():
        for cited in re.finditer(r"\bdecisions? ((?:\d{4}(?:\s*(?:,|and|or|to|\u2013|-)\s*)?)+)", text):
            missing += [f"{name}: decision {n}" for n in re.findall(r"\d{4}", cited[1]) if n not in known]
    assert missing == []


def test_every_cited_section_of_a_doc_exists() -> None:
    docs = {p.name: sections(p) for p in DOCS.glob("*.md")}
    missing = []
    for name, text in texts().items():
        for doc, number in re.findall(r"\b(\w+\.md),? §(\d+)", text):
            if doc in docs and number not in docs[doc]:
                missing.append(f"{name}: {doc} §{number}")
        if name == "docs/architecture.md":  # a bare §N there is one of its own sections
            own = re.findall(r"(?<!\.md )(?<!ADR-01\d\d )§(\d+)", text)
            missing += [f"{name}: §{n}" for n in own if n not in docs["architecture.md"]]
    assert missing == []


def test_seed_records_are_cited_through_decision_0000_and_their_sections_exist() -> None:
    """The form is "decision 0000 (ADR-0118 §6)": the records are not in this repository, decision 0000 is."""
    headings = set(re.findall(r"^### (ADR-01\d\d §\d+)", SEEDS.read_text(), re.M))
    assert len(headings) == 11
    wrong = []
    for name, text in texts().items():
        if name == SEEDS.relative_to(REPO).as_posix():
            continue
        for cited in re.finditer(r"ADR-01\d\d §\d+", text):  # a section; naming a record alone is fine
            opened = text.rfind("decision 0000 (", 0, cited.start())
            if opened < 0 or ")" in text[opened : cited.start()] or cited.start() - opened > 80:
                wrong.append(f"{name}: {text[max(0, cited.start() - 30) : cited.end()]!r}")
            elif cited[0] not in headings:
                wrong.append(f"{name}: {cited[0]} is not a section of decision 0000")
    assert wrong == []


def test_no_citation_of_an_issue_tracker() -> None:
    found = [f"{name}: {m[0]!r}" for name, text in texts().items() for m in re.finditer(r"\b[Ii]ssues? #?\d+\b", text)]
    assert found == []
