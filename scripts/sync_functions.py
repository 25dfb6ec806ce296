"""Write each function's sqitch deploy/revert/verify scripts from its db/functions file.

db/functions/<schema>/<name>.sql is the reviewable truth (docs/architecture.md §2). sqitch hashes only
the deploy script, and a later rework must keep the old body, so the deploy script is a FROZEN
COPY of the function file, not an include. Usage:

    python scripts/sync_functions.py           # write the scripts
    python scripts/sync_functions.py --check   # exit 1 and name every script that drifted

A function file declares, in its header comment:
    -- signature: ql_api.offer_pull_v1(uuid, uuid, bigint, bytea, uuid)
    -- grant execute: ql_runtime            (optional; a comma list of roles)
and every function states its volatility (volatile | stable | immutable) on a line of its own.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DB = ROOT / "db"
ROLES = ("ql_owner", "ql_runtime", "ql_scheduler", "ql_readonly")


@dataclass(frozen=True)
class Routine:
    change: str  # e.g. "ql_api/offer_pull_v1"
    body: str
    signature: str
    kind: str  # "function" or "procedure"
    grants: tuple[str, ...]


def parse(path: Path) -> Routine:
    body = path.read_text()
    change = path.relative_to(DB / "functions").with_suffix("").as_posix()
    sig = re.search(r"^-- signature: (\S.*)$", body, re.M)
    if sig is None:
        raise SystemExit(f"{path}: no '-- signature:' header line")
    grant = re.search(r"^-- grant execute: (\S.*)$", body, re.M)
    grants = tuple(g.strip() for g in grant.group(1).split(",")) if grant else ()
    kind = "procedure" if re.search(r"create or replace procedure", body, re.I) else "function"
    if kind == "function" and not re.search(r"^\s*(volatile|stable|immutable)\s*$", body, re.M | re.I):
        raise SystemExit(
            f"{path}: a function states its volatility (volatile, stable or immutable) on a line of its own"
        )
    return Routine(change, body, sig.group(1).strip(), kind, grants)


def deploy(r: Routine) -> str:
    return (
        f"-- Deploy qinglong:{r.change} to pg\n"
        f"-- FROZEN COPY of db/functions/{r.change}.sql, written by scripts/sync_functions.py.\n"
        "-- Edit that file and re-run the script; never edit this one.\n"
        "begin;\nset local role ql_owner;\n\n"
        f"{r.body.rstrip()}\n\ncommit;\n"
    )


def revert(r: Routine) -> str:
    return (
        f"-- Revert qinglong:{r.change} from pg\n"
        "begin;\nset local role ql_owner;\n"
        f"drop {r.kind} {r.signature};\n"
        "commit;\n"
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="report drift instead of writing")
    args = ap.parse_args()
    drifted: list[str] = []
    for path in sorted((DB / "functions").rglob("*.sql")):
        r = parse(path)
        for folder, text in (("deploy", deploy(r)), ("revert", revert(r)), ("verify", verify(r))):
            target = DB / folder / f"{r.change}.sql"
            if target.exists() and target.read_text() == text:
                continue
            if args.check:
                drifted.append(str(target.relative_to(ROOT)))
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
    for d in drifted:
        print(f"drift: {d} differs from its db/functions source", file=sys.stderr)
    return 1 if drifted else 0


if __name__ == "__main__":
    sys.exit(main())
