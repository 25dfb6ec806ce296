"""Write the sqitch deploy scripts of db/functions and db/schema, and the revert and verify scripts of
db/functions. Touches: only db/deploy, db/revert and db/verify (never a frozen `<change>@<tag>.sql` copy).

db/functions/<schema>/<name>.sql (one routine) and db/schema/<change>.sql (tables, types, indexes: a whole
script, transaction included) are the reviewable truth (docs/architecture.md §2). sqitch hashes only the
deploy script, and a later rework must keep the old body, so a deploy script is a FROZEN COPY of its
source, not an include. A schema change's revert and verify are written by hand in db/revert and
db/verify; a function's are derived here. Usage:

    python scripts/sync_functions.py           # write the scripts
    python scripts/sync_functions.py --check   # exit 1 and name every script that drifted

A function file holds one `create or replace function|procedure` whose parameter list gives the signature
(argument types only: OUT parameters and defaults left out, `signature`), and its GRANT EXECUTE statements
give the roles the verify script expects (`grants`; PUBLIC loses EXECUTE by the default privileges of
db/schema/schemas.sql). Every function states its volatility (volatile | stable | immutable) on a line of
its own. A `-- signature:` or `-- grant execute:` header line, which once restated them, is refused; the frozen
bodies of earlier instances still hold theirs, which are ignored.

Reworked changes. A change the plan lists again after a tag was reworked (`sqitch rework`): sqitch
copied the earlier instance's scripts to <change>@<tag>.sql, named after the first tag between the two
instances whose deploy copy exists, and those copies are frozen for ever. For the latest instance this
script writes deploy/<change>.sql and verify/<change>.sql as for any function, and revert/<change>.sql
RESTORES the previous instance: the body of deploy/<change>@<tag>.sql (between its header and `commit;`)
with exactly its grants (every role's privilege is revoked first; the body grants its own again). If
the signature or kind changed, the new routine is dropped first instead. Only a never-reworked
function's revert is `drop`. A schema change is never reworked (a later change alters what it made).
It never writes a frozen copy: a missing one, or a deploy copy that is no longer what this script once
wrote, is an error in both modes, and then nothing is written.
"""

from __future__ import annotations

import argparse
import itertools
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS = ROOT / "db" / "functions"
SCHEMA = ROOT / "db" / "schema"
ROLES = ("ql_owner", "ql_runtime", "ql_scheduler", "ql_readonly")
FOLDERS = ("deploy", "revert", "verify")
DEPLOY_TAIL = "\n\ncommit;\n"


@dataclass(frozen=True)
class Routine:
    change: str  # e.g. "ql_api/offer_pull_v1"
    body: str
    signature: str
    kind: str  # "function" or "procedure"
    grants: tuple[str, ...]


CREATE = re.compile(
    r"^create\s+or\s+replace\s+(function|procedure)\s+([a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*)\s*\(", re.I | re.M
)
GRANT = re.compile(
    r"^grant\s+execute\s+on\s+(?:function|procedure)\s+([a-z0-9_.]+)\s*\(.*?\)\s+to\s+([^;]+);", re.I | re.M | re.S
)
MODES = ("in", "out", "inout", "variadic")
# First words of the built-in type names written with a space (`double precision`, `time with time zone`,
# `character varying(8)`, `bit varying`, `interval day to second`): an unnamed parameter of such a type.
SPACED_TYPES = ("double", "character", "char", "national", "bit", "time", "timestamp", "interval")


def parameters(text: str) -> tuple[list[str], int] | None:
    """The declarations of the parameter list `text` opens (it starts just after the `(`), split at the commas
    outside parentheses, brackets, quotes and `--` comments (comments dropped), and the index of its `)`; None
    when it never closes."""
    parts: list[str] = []
    buf: list[str] = []
    depth, i = 0, 0
    while i < len(text):
        c = text[i]
        if text.startswith("--", i):
            i = text.find("\n", i) if "\n" in text[i:] else len(text)
            continue
        if c in "'\"":  # a quoted literal or identifier; a doubled quote stays inside it
            end = i + 1
            while end < len(text) and (text[end] != c or text.startswith(c * 2, end)):
                end += 2 if text.startswith(c * 2, end) else 1
            buf.append(text[i : end + 1])
            i = end + 1
            continue
        depth += (c in "([") - (c in ")]")
        if depth < 0:
            parts.append("".join(buf))
            return [p.strip() for p in parts if p.strip()], i
        if c == "," and depth == 0:
            parts.append("".join(buf))
            buf = []
        else:
            buf.append(c)
        i += 1
    return None


def argument_type(parameter: str) -> str | None:
    """The type of one parameter declaration, as a signature names it; None for an OUT parameter."""
    declared = re.split(r"\s*=\s*|\s+default\s+", " ".join(parameter.split()), maxsplit=1, flags=re.I)[0]
    words = declared.split(" ")
    if words[0].lower() in MODES:
        mode, words = words[0].lower(), words[1:]
        if mode == "out":
            return None
    if len(words) > 1 and words[0].lower() not in SPACED_TYPES:
        words = words[1:]  # the parameter's name
    return " ".join(words).lower()


def signature(body: str, origin: Path) -> tuple[str, str]:
    """The kind and the signature (`ql.f(uuid, text[])`) of the routine `body` creates."""
    found = list(CREATE.finditer(body))
    if len(found) != 1:
        raise SystemExit(f"{origin}: {len(found)} 'create or replace function|procedure' statements; one is wanted")
    kind, name = found[0][1].lower(), found[0][2]
    listed = parameters(body[found[0].end() :])
    if listed is None:
        raise SystemExit(f"{origin}: the parameter list of {name} never closes")
    types = [t for t in map(argument_type, listed[0]) if t is not None]
    return kind, f"{name}({', '.join(types)})"


def grants(body: str, name: str) -> tuple[str, ...]:
    """The roles the GRANT EXECUTE statements of `body` give the routine `name`, in order."""
    roles = [r.strip().lower() for m in GRANT.finditer(body) if m[1].lower() == name for r in m[2].split(",")]
    return tuple(dict.fromkeys(roles))


def parse_text(change: str, body: str, origin: Path) -> Routine:
    kind, sig = signature(body, origin)
    if kind == "function" and not re.search(r"^\s*(volatile|stable|immutable)\s*$", body, re.M | re.I):
        raise SystemExit(
            f"{origin}: a function states its volatility (volatile, stable or immutable) on a line of its own"
        )
    return Routine(change, body, sig, kind, grants(body, sig.split("(", 1)[0]))


def parse(path: Path, functions: Path = FUNCTIONS) -> Routine:
    return parse_text(path.relative_to(functions).with_suffix("").as_posix(), path.read_text(), path)


def frozen_head(change: str, source: str) -> str:
    return (
        f"-- Deploy qinglong:{change} to pg\n"
        f"-- FROZEN COPY of db/{source}/{change}.sql, written by scripts/sync_functions.py.\n"
        "-- Edit that file and re-run the script; never edit this one.\n"
    )


def deploy_head(change: str) -> str:
    return frozen_head(change, "functions") + "begin;\nset local role ql_owner;\n\n"


def deploy(r: Routine) -> str:
    return f"{deploy_head(r.change)}{r.body.rstrip()}{DEPLOY_TAIL}"


def frozen_body(change: str, path: Path) -> str:
    """The function file a frozen deploy copy was written from (the inverse of `deploy`)."""
    text, head = path.read_text(), deploy_head(change)
    if not (text.startswith(head) and text.endswith(DEPLOY_TAIL)):
        raise SystemExit(f"{path}: not a deploy copy written by this script (its header or final commit changed)")
    return text[len(head) : -len(DEPLOY_TAIL)] + "\n"


def revert(r: Routine) -> str:
    return (
        f"-- Revert qinglong:{r.change} from pg\n"
        "begin;\nset local role ql_owner;\n"
        f"drop {r.kind} {r.signature};\n"
        "commit;\n"
    )


def restore(r: Routine, previous: Routine, tag: str) -> str:
    """The revert of a reworked change: back to the previous instance's body and grants."""
    if (r.signature, r.kind) != (previous.signature, previous.kind):
        first = f"drop {r.kind} {r.signature};"
    else:  # the previous body grants its own again; PUBLIC and every other role start from nothing
        first = f"revoke all on {r.kind} {r.signature} from public, {', '.join(ROLES[1:])};"
    return (
        f"-- Revert qinglong:{r.change} from pg\n"
        f"-- RESTORES the previous instance: the body of deploy/{r.change}@{tag}.sql with its grants,\n"
        "-- written by scripts/sync_functions.py; never edit this one.\n"
        "begin;\nset local role ql_owner;\n"
        f"{first}\n\n"
        f"{previous.body.rstrip()}{DEPLOY_TAIL}"
    )


def verify(r: Routine) -> str:
    sig = r.signature.replace("'", "''")
    lines = [
        f"-- Verify qinglong:{r.change} on pg",
        "-- Existence, signature, owner and privileges both ways; never behaviour (that is pgTAP's).",
        "select 1 / pg_catalog.count(*)::int from pg_catalog.pg_proc p",
        "join pg_catalog.pg_roles o on o.oid = p.proowner",
        f"where p.oid = '{sig}'::regprocedure and o.rolname = 'ql_owner'",
    ]
    if r.change.startswith("ql_api/") and r.kind == "function":  # converge is a procedure: see its header
        lines += [
            "  and p.prosecdef",
            "  and p.proconfig = array['search_path=pg_catalog, pg_temp']",
        ]
    lines[-1] += ";"
    for role in ("public", *ROLES[1:]):
        allowed = role in r.grants
        lines.append(
            f"select 1 / ({'' if allowed else 'not '}"
            f"pg_catalog.has_function_privilege('{role}', '{sig}', 'execute'))::int;"
        )
    return "\n".join(lines) + "\n"


def frozen_tags(plan: str, scripts: Path) -> tuple[dict[str, list[str]], list[str]]:
    """Per reworked change, the tag of each earlier instance's frozen scripts, oldest first (the last
    one is the instance a revert restores); and what is missing. sqitch's rule: of the tags between an
    instance and the next, the first whose deploy/<change>@<tag>.sql exists."""
    entries: list[str] = []  # change names, and tags as "@name", in plan order
    for line in plan.splitlines():
        if line.strip() and not line.startswith(("%", "#")):
            entries.append(line.split()[0].lstrip("+-"))
    tags: dict[str, list[str]] = {}
    missing: list[str] = []
    for change in dict.fromkeys(e for e in entries if not e.startswith("@")):
        at = [i for i, e in enumerate(entries) if e == change]
        for start, end in itertools.pairwise(at):
            between = [e[1:] for e in entries[start:end] if e.startswith("@")]
            found = next((t for t in between if (scripts / "deploy" / f"{change}@{t}.sql").is_file()), None)
            if found is None:
                missing.append(f"deploy/{change}@<{' or '.join(between) or 'a tag'}>.sql")
                continue
            tags.setdefault(change, []).append(found)
            missing += [
                f"{folder}/{change}@{found}.sql"
                for folder in FOLDERS[1:]
                if not (scripts / folder / f"{change}@{found}.sql").is_file()
            ]
    return tags, missing


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="report drift instead of writing")
    ap.add_argument("--project", type=Path, default=ROOT, help="the sqitch project (default: this script's repository)")
    ap.add_argument("--functions", type=Path, default=FUNCTIONS, help="the function files (default: db/functions)")
    ap.add_argument("--schema", type=Path, default=SCHEMA, help="the schema scripts (default: db/schema)")
    args = ap.parse_args()
    project, functions, schema = args.project.resolve(), args.functions.resolve(), args.schema.resolve()
    scripts = project / "db"
    reworked, missing = frozen_tags((project / "sqitch.plan").read_text(), scripts)
    shown = scripts.relative_to(ROOT) if scripts.is_relative_to(ROOT) else scripts
    if missing:  # a revert restores from them: write nothing until they are back
        for m in missing:
            print(f"missing: {shown / m}, a frozen copy of a reworked change (restore it from git)", file=sys.stderr)
        return 1
    wanted: list[tuple[str, str, str]] = []  # (folder, change, text)
    for path in sorted(functions.rglob("*.sql")):
        r = parse(path, functions)
        stale = re.search(r"^-- (signature|grant execute):", r.body, re.M)
        if stale:  # the CREATE and GRANT statements say it; a second statement of it could only drift
            raise SystemExit(f"{path}: drop the '-- {stale[1]}:' line (read from the {stale[1].split()[0].upper()})")
        back = revert(r)
        if r.change in reworked:
            tag = reworked[r.change][-1]
            previous = scripts / "deploy" / f"{r.change}@{tag}.sql"
            back = restore(r, parse_text(r.change, frozen_body(r.change, previous), previous), tag)
        wanted += [("deploy", r.change, deploy(r)), ("revert", r.change, back), ("verify", r.change, verify(r))]
    for path in sorted(schema.rglob("*.sql")):
        change = path.relative_to(schema).with_suffix("").as_posix()
        if change in reworked:
            raise SystemExit(f"{path}: a schema change is never reworked; add a change that alters it")
        wanted.append(("deploy", change, frozen_head(change, "schema") + path.read_text()))
    drifted: list[str] = []
    for folder, change, text in wanted:
        target = scripts / folder / f"{change}.sql"
        if target.exists() and target.read_text() == text:
            continue
        if args.check:
            drifted.append(f"{folder}/{change}.sql")
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
    for d in drifted:
        print(f"drift: {shown / d} differs from its db/functions or db/schema source", file=sys.stderr)
    return 1 if drifted else 0


if __name__ == "__main__":
    sys.exit(main())
