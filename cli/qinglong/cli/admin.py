"""The operator's database calls: one ql_api function per command, by name, over a DBA connection
(the operator functions are not granted to the runtime role). Touches the database it is given.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from qinglong.wire.errors import OUTCOME_STATUSES

_NAME = re.compile(r"[a-z_][a-z0-9_]*_v[0-9]+")


class Unavailable(Exception):
    """The database could not be reached."""


class Refused(Exception):
    """The database refused the call (privileges, no schema, a malformed DSN) or answered an outcome."""


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class Transaction:
    """Several operator calls that commit together or not at all."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def call(self, function: str, *args: Any) -> dict[str, Any]:
        """One ql_api call; an invalid, not_found or fenced outcome raises Refused (and rolls back)."""
        if not _NAME.fullmatch(function):
            raise ValueError(f"not a ql_api function: {function}")
        query = f"select ql_api.{function}({', '.join(['%s'] * len(args))})".encode()
        row = self._conn.execute(query, [Jsonb(a) if isinstance(a, dict) else a for a in args]).fetchone()
        assert row is not None and isinstance(row[0], dict)
        result: dict[str, Any] = row[0]
        if result.get("status") in OUTCOME_STATUSES:
            detail = f": {result['detail']}" if result.get("detail") else ""
            raise Refused(f"{function}: {result['status']} ({result.get('reason')}){detail}")
        return result


@contextlib.contextmanager
def transaction(dsn: str) -> Iterator[Transaction]:
    """A DBA connection in one transaction: commit when the block ends, roll back on any error."""
    try:
        with psycopg.connect(dsn, connect_timeout=5) as conn, conn.transaction():
            yield Transaction(conn)
    except psycopg.OperationalError as exc:
        raise Unavailable(_first_line(exc)) from None
    except psycopg.Error as exc:
        raise Refused(_first_line(exc)) from None


def call(dsn: str, function: str, args: Sequence[Any]) -> dict[str, Any]:
    """One ql_api call in its own transaction; its jsonb result (outcomes raise Refused)."""
    with transaction(dsn) as tx:
        return tx.call(function, *args)


def converge_once(dsn: str, page_size: int, max_pages: int, grace_ms: int) -> None:
    """One convergence cycle: `CALL ql_api.converge(…)` in autocommit mode (it commits per page)."""
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute("call ql_api.converge(%s, %s, %s)", (page_size, max_pages, grace_ms))
    except psycopg.OperationalError as exc:
        raise Unavailable(_first_line(exc)) from None
    except psycopg.Error as exc:
        raise Refused(_first_line(exc)) from None
