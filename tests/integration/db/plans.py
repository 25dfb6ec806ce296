"""Executed plans as the tests read them: a connection whose every statement (nested ones, inside functions,
included) answers its plan through auto_explain, and walks over plan nodes. Touches the database it is given.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg


def explaining(dsn: str, role: str) -> tuple[psycopg.Connection[Any], list[dict[str, Any]]]:
    """A connection as `role` (the superuser of `dsn` loads auto_explain first) whose every statement answers its
    executed plan, with buffers, as a notice; and the list those plans are appended to. The caller closes it."""
    plans: list[dict[str, Any]] = []

    def keep(diagnostic: psycopg.errors.Diagnostic) -> None:
        text = diagnostic.message_primary or ""
        if "plan:" in text:
            plans.append(json.loads(text.split("plan:", 1)[1]))

    conn = psycopg.connect(dsn, autocommit=True)
    conn.add_notice_handler(keep)
    conn.execute("load 'auto_explain'")
    for setting, value in (
        ("log_min_duration", "0"),
        ("log_nested_statements", "on"),
        ("log_analyze", "on"),
        ("log_buffers", "on"),
        ("log_timing", "off"),
        ("log_format", "json"),
        ("log_level", "notice"),
    ):
        conn.execute(f"set auto_explain.{setting} = {value}")
    conn.execute(f"set role {role}")
    return conn, plans


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A plan node and every node below it."""
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def buffers(plan: dict[str, Any]) -> int:
    """Shared buffers a node touched (hit or read)."""
    return int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))
