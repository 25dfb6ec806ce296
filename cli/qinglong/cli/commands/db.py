"""`qinglong db`: deploy, verify, revert or inspect the schema with sqitch (the installed plan).
Touches the database of --target (or QINGLONG_DB_TARGET) through a sqitch child process.
"""

from __future__ import annotations

import argparse
import os
import subprocess

from qinglong.cli.common import Commands, Failure, group
from qinglong.db import sqitch


def run_sqitch(args: argparse.Namespace) -> int:
    target = args.target or os.environ.get("QINGLONG_DB_TARGET")
    if not target:
        raise Failure("no sqitch target: pass --target db:pg://user@host:port/db or set QINGLONG_DB_TARGET")
    to = getattr(args, "to", None)
    extra = (["-y"] if args.command == "revert" else []) + (["--to", to] if to else [])
    out = subprocess.run(sqitch(args.command, *extra, target), capture_output=True, text=True)
    if out.returncode != 0:
        lines = [line for line in (out.stderr or out.stdout).splitlines() if line.strip()]
        raise Failure(f"sqitch {args.command} failed: {lines[-1] if lines else out.returncode}")
    if args.command == "status":
        print(out.stdout.rstrip())
    else:
        print(f"sqitch {args.command}{f' --to {to}' if to else ''}: ok ({target})")
    return 0


def register(top: Commands) -> None:
    db = group(top, "db", "deploy, verify, revert or inspect the schema with sqitch (the installed plan)")
    for name, text in (
        ("deploy", "deploy what the database lacks (--to a release tag: no further)"),
        ("verify", "run every deployed change's verify script"),
        ("revert", "revert to a release tag (--to @vX.Y.Z), or everything"),
        ("status", "what is deployed, and what the installed plan would add"),
    ):
        p = db.add_parser(name, help=text)
        p.add_argument("--target", help="sqitch target db:pg://… (default: QINGLONG_DB_TARGET)")
        if name in ("deploy", "revert"):
            whole = "the whole plan" if name == "deploy" else "everything"
            p.add_argument("--to", metavar="@TAG", help=f"a change or tag of the plan, e.g. @v0.1.0 (default: {whole})")
        p.set_defaults(handler=run_sqitch)
