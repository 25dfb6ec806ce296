"""`qinglong project`: create a project (idempotent by name) and list them.
Touches the database (DBA connection from --dsn or QINGLONG_DSN).
"""

from __future__ import annotations

import argparse

from qinglong.cli import operators as op
from qinglong.cli.common import Commands, catalogue_command, creating_options, dsn_option, group
from qinglong.cli.connect import admin_transaction
from qinglong.cli.printing import created, emit, table, when


def create(args: argparse.Namespace) -> int:
    result = admin_transaction(args, lambda tx: tx.call(op.project_create_v1, p_name=args.name))
    return created(args, result["projectId"], result, f"project {args.name}: {result['status']} {result['projectId']}")


def list_projects(args: argparse.Namespace) -> int:
    listed = admin_transaction(args, lambda tx: tx.call(op.project_list_v1))
    rows = [
        (p["projectId"], p["name"], p["status"], p["version"], p["tasks"], when(p["createdAtMs"]))
        for p in listed["projects"]
    ]
    heads = ("ID", "NAME", "STATUS", "VERSION", "TASKS", "CREATED")
    return emit(args, {"projects": listed["projects"]}, table(heads, rows))


def register(top: Commands) -> None:
    project = group(top, "project", "projects")
    p = project.add_parser("create", help="create a project (idempotent by name)")
    dsn_option(p)
    p.add_argument("name", help="the project's name")
    creating_options(p)
    p.set_defaults(handler=create)
    catalogue_command(project, "list", "every Project: status, version, task count", list_projects)
