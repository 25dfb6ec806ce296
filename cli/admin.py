"""The operator's database calls: one ql_api function per command, by name, over a DBA connection
(the operator functions are not granted to the runtime role). Touches the database it is given.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

_NAME = re.compile(r"[a-z_][a-z0-9_]*_v[0-9]+")


class Unavailable(Exception):
    """The database could not be reached."""


def call(dsn: str, function: str, args: Sequence[Any]) -> dict[str, Any]:
    """`select ql_api.<function>(args…)` in its own transaction; its jsonb result."""
    if not _NAME.fullmatch(function):
        raise ValueError(f"not a ql_api function: {function}")
    query = f"select ql_api.{function}({', '.join(['%s'] * len(args))})".encode()
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            row = conn.execute(query, [Jsonb(a) if isinstance(a, dict) else a for a in args]).fetchone()
    except psycopg.OperationalError as exc:
        raise Unavailable(str(exc).strip().splitlines()[0] if str(exc).strip() else "unreachable") from None
    assert row is not None and isinstance(row[0], dict)
    result: dict[str, Any] = row[0]
    return result


def converge_once(dsn: str, page_size: int, max_pages: int, grace_ms: int) -> None:
    """One convergence cycle: `CALL ql_api.converge(…)` in autocommit mode (it commits per page)."""
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute("call ql_api.converge(%s, %s, %s)", (page_size, max_pages, grace_ms))
    except psycopg.OperationalError as exc:
        raise Unavailable(str(exc).strip().splitlines()[0] if str(exc).strip() else "unreachable") from None
    except psycopg.Error as exc:
        raise ValueError(str(exc).strip().splitlines()[0]) from None
