"""`qinglong role`: set or revoke a subject's role in a Project (each by name or id), in one operator transaction.
Touches the database (DBA connection from --dsn or QINGLONG_DSN).
"""

from __future__ import annotations

import argparse
import functools
from typing import TYPE_CHECKING, Any

from qinglong.cli import operators as op
from qinglong.cli.common import PROJECT_HELP, ROLES, Commands, Failure, catalogue_command, group
from qinglong.cli.connect import admin_transaction, one
from qinglong.cli.printing import emit

if TYPE_CHECKING:
    from qinglong.cli.admin import Transaction


def _bind(args: argparse.Namespace, revoke: bool, tx: Transaction) -> dict[str, Any]:
    project = one(tx.call(op.project_list_v1)["projects"], "name", args.project, "project", "projectId")
    subject = one(tx.call(op.subject_list_v1)["subjects"], "name", args.subject, "subject", "subjectId")
    role = args.role if not revoke else next(
        (r["role"] for r in subject["roles"] if r["projectId"] == project["projectId"]), None)  # fmt: skip
    if role is None:
        raise Failure(f"subject {subject['name']} has no role in project {project['name']}: nothing to revoke")
    done = tx.call(op.role_binding_set_v1, p_project_id=project["projectId"], p_subject_id=subject["subjectId"],
                   p_role=role, p_active=not revoke)  # fmt: skip
    return {"projectId": project["projectId"], "project": project["name"], "subjectId": subject["subjectId"],
            "subject": subject["name"], "role": done["role"], "active": done["active"]}  # fmt: skip


def bind(args: argparse.Namespace, revoke: bool) -> int:
    done = admin_transaction(args, functools.partial(_bind, args, revoke))
    verb = f"is {done['role']}" if done["active"] else f"no longer {done['role']}"
    return emit(args, done, f"subject {done['subject']} {verb} in project {done['project']}")


def register(top: Commands) -> None:
    role = group(top, "role", "subjects' roles in Projects")
    for command, revoke, text in (
        ("set", False, "grant or change a subject's role in a Project"),
        ("revoke", True, "revoke a subject's role in a Project"),
    ):
        p = catalogue_command(role, command, text, functools.partial(bind, revoke=revoke))
        p.add_argument("--project", required=True, metavar="NAME|ID", help=PROJECT_HELP)
        p.add_argument("--subject", required=True, metavar="NAME|ID", help="the subject, by name, id or short id")
        if not revoke:
            p.add_argument("--role", required=True, choices=ROLES, help="the role to bind")
