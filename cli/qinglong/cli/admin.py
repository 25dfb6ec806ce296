"""The operator's database calls over a DBA connection (the operator functions are not granted to the runtime
role): each a ql_api routine declared in qinglong.cli.operators, every argument named. Touches the database it is
given.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, ParamSpec

import psycopg

from qinglong.cli.operators import Operator, converge
from qinglong.wire.errors import OUTCOME_STATUSES

P = ParamSpec("P")


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

    def call(self, function: Operator[P], *args: P.args, **kwargs: P.kwargs) -> dict[str, Any]:
        """One ql_api function call, its arguments named; an invalid, not_found or fenced outcome raises Refused
        (and rolls back)."""
        row = self._conn.execute(*function.statement(*args, **kwargs)).fetchone()
        assert row is not None and isinstance(row[0], dict)
        result: dict[str, Any] = row[0]
        if result.get("status") in OUTCOME_STATUSES:
            detail = f": {result['detail']}" if result.get("detail") else ""
            raise Refused(f"{function.name}: {result['status']} ({result.get('reason')}){detail}")
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


def call(dsn: str, function: Operator[P], *args: P.args, **kwargs: P.kwargs) -> dict[str, Any]:
    """One ql_api call in its own transaction; its jsonb result (outcomes raise Refused)."""
    with transaction(dsn) as tx:
        return tx.call(function, *args, **kwargs)


def converge_once(dsn: str, page_size: int, max_pages: int, grace_ms: int) -> None:
    """One convergence cycle: `CALL ql_api.converge(…)` in autocommit mode (it commits per page)."""
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute(*converge.statement(p_page_size=page_size, p_max_pages=max_pages, p_grace_ms=grace_ms))
    except psycopg.OperationalError as exc:
        raise Unavailable(_first_line(exc)) from None
    except psycopg.Error as exc:
        raise Refused(_first_line(exc)) from None
