"""`qinglong subject`: create a user or agent of the user API (its bearer token goes to a new 0600 file, only its
digest to the database), list them, disable and enable them. Touches the database (DBA connection) and the token
file of --token-file (replaced only with --force).
"""

from __future__ import annotations

import argparse
import functools
import os
import secrets
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qinglong.cli import operators as op
from qinglong.cli.common import ROLES, Commands, Failure, catalogue_command, creating_options, dsn_option, group, name
from qinglong.cli.connect import admin_transaction, dsn, one, project_id
from qinglong.cli.printing import created, emit, status_set, table

if TYPE_CHECKING:
    from qinglong.cli.admin import Transaction


def write_new(path: Path, text: str, force: bool) -> None:
    """`text` in a new 0600 file at `path`, atomically: a complete file or none. An existing file stays (refused)
    unless `force`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mkstemp: mode 0600
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if force:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)  # fails if path exists: no window in which another file is replaced
            except FileExistsError:
                raise Failure(f"{path} exists: pass --force to replace it") from None
    finally:
        Path(tmp).unlink(missing_ok=True)


def create(args: argparse.Namespace) -> int:
    from qinglong.wire.common import token_digest

    if args.role and not args.project:
        raise Failure("--role goes with --project (the project to bind the subject to)")
    if args.token_file.exists() and not args.force:
        raise Failure(f"{args.token_file} exists: pass --force to replace it")
    dsn(args)  # no database: refused before any file is written
    token = secrets.token_urlsafe(32)

    def body(tx: Transaction) -> dict[str, Any]:  # the subject, its binding and its token file: all or nothing
        new = tx.call(op.subject_create_v1, p_kind=args.kind, p_name=args.name, p_token_digest=token_digest(token))
        if args.project:
            tx.call(op.role_binding_set_v1, p_project_id=project_id(tx, args.project),
                    p_subject_id=new["subjectId"], p_role=args.role or "operator", p_active=True)  # fmt: skip
        write_new(args.token_file, token + "\n", args.force)  # before the commit: a refused write rolls back
        return new

    result = admin_transaction(args, body)
    sentence = f"subject {args.name} ({args.kind}) {result['subjectId']}: bearer token written to {args.token_file}"
    return created(args, result["subjectId"], result, sentence)


def list_subjects(args: argparse.Namespace) -> int:
    listed = admin_transaction(args, lambda tx: tx.call(op.subject_list_v1))
    rows = [
        (s["subjectId"], s["name"], s["kind"], s["status"], [f"{r['project']}:{r['role']}" for r in s["roles"]])
        for s in listed["subjects"]
    ]
    heads = ("ID", "NAME", "KIND", "STATUS", "ROLES")
    return emit(args, {"subjects": listed["subjects"]}, table(heads, rows))


def set_status(args: argparse.Namespace, active: bool) -> int:
    def body(tx: Transaction) -> dict[str, Any]:
        subject = one(tx.call(op.subject_list_v1)["subjects"], "name", args.subject, "subject", "subjectId")
        return tx.call(op.subject_status_set_v1, p_subject=subject["subjectId"], p_active=active)

    done = admin_transaction(args, body)
    return status_set(args, done, "subject", "subjectId")


def register(top: Commands) -> None:
    subject = group(top, "subject", "users and agents of the user API")
    p = subject.add_parser("create", help="create a subject, write its new bearer token to a 0600 file")
    dsn_option(p)
    p.add_argument("--kind", choices=("user", "agent"), default="user", help="a person or a program (default user)")
    p.add_argument("--name", required=True, help="the subject's name")
    p.add_argument("--token-file", type=Path, required=True, help="the new 0600 file for its bearer token")
    p.add_argument("--force", action="store_true", help="replace an existing token file")
    p.add_argument("--project", type=name, metavar="NAME|ID", help="bind it to this project, by name, id or short id "
                   "(default: none)…")  # fmt: skip
    p.add_argument("--role", choices=ROLES, help="…as (default operator)")
    creating_options(p)
    p.set_defaults(handler=create)
    catalogue_command(subject, "list", "every subject: kind, status, roles (never a token)", list_subjects)
    for command, active, text in (
        ("disable", False, "disable a subject: the user API refuses it from now on"),
        ("enable", True, "enable a disabled subject"),
    ):
        p = catalogue_command(subject, command, text, functools.partial(set_status, active=active))
        p.add_argument("subject", metavar="NAME|ID", help="the subject, by name, id or short id")
