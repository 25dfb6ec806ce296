"""The shell's one door to PostgreSQL: a psycopg AsyncConnectionPool connected as ql_runtime, and
calls of ql_api functions by name. The only module of the shell that imports psycopg.

A call is `select ql_api.<function>(p_a => %(p_a)s, …)`: named notation with bind parameters. The
function and parameter names come from the route table (checked as identifiers here), never from a
request, and no other SQL is ever built here. Raw tokens and session keys never reach it (only their
SHA-256 digests do). Connection faults become `StorageUnavailable` (503); a serializable call
retries 40001 a bounded number of times.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any, Final

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from qinglong.shell.metrics import DB_LATENCY

_FUNCTION: Final = re.compile(r"[a-z_][a-z0-9_]*_v[0-9]+")
_PARAMETER: Final = re.compile(r"p_[a-z0-9_]+")
SERIALIZABLE_ATTEMPTS: Final = 5


class StorageUnavailable(Exception):
    """The database cannot be reached or answered with a connection-level fault."""


class BadProjection(Exception):
    """A ql_api function answered something that is not a JSON object, or failed on its input."""


def statement(function: str, parameters: Iterable[str]) -> str:
    """`ql_api.<function>(p_a => %(p_a)s, …)`, once the function and every parameter name are identifiers."""
    if not _FUNCTION.fullmatch(function):
        raise ValueError(f"not a ql_api function name: {function!r}")
    names = list(parameters)
    if not all(_PARAMETER.fullmatch(name) for name in names):
        raise ValueError(f"not parameter names of ql_api.{function}")
    return f"ql_api.{function}({', '.join(f'{name} => %({name})s' for name in names)})"


class Database:
    """Calls ql_api functions through one pool (sized to the cores, as docs/architecture.md §12 says)."""

    def __init__(self, dsn: str, *, min_size: int = 1, max_size: int = 4, timeout: float = 5.0) -> None:
        self._pool = AsyncConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            open=False,
            kwargs={"autocommit": True, "application_name": "qinglong-shell"},
        )

    async def open(self) -> None:
        await self._pool.open(wait=False)

    async def close(self) -> None:
        await self._pool.close()

    async def healthy(self) -> bool:
        """True when a pooled connection answers a trivial probe (the one statement that is no API call)."""
        try:
            async with self._pool.connection(timeout=2.0) as conn:
                await conn.execute("select 1")
        except (psycopg.OperationalError, PoolTimeout):
            return False
        return True

    async def call(self, function: str, args: Mapping[str, object], *, serializable: bool = False) -> dict[str, Any]:
        """Call ql_api.<function>(name => value, …) in its own transaction and return its jsonb result."""
        query = f"select {statement(function, args)}"
        started = time.perf_counter()
        try:
            for attempt in range(1, SERIALIZABLE_ATTEMPTS + 1):
                try:
                    return await self._once(query, args, serializable)
                except pg_errors.SerializationFailure:
                    if not serializable or attempt == SERIALIZABLE_ATTEMPTS:
                        raise
                    await asyncio.sleep(random.uniform(0.001, 0.005) * attempt)  # noqa: S311 - jitter
            raise AssertionError("unreachable")
        except (psycopg.OperationalError, PoolTimeout) as exc:
            raise StorageUnavailable(type(exc).__name__) from None
        except psycopg.Error as exc:
            raise BadProjection(type(exc).__name__) from None
        finally:
            DB_LATENCY.labels(function).observe(time.perf_counter() - started)

    async def _once(self, query: str, args: Mapping[str, object], serializable: bool) -> dict[str, Any]:
        async with self._pool.connection() as conn:
            if serializable:
                async with conn.transaction():
                    await conn.execute("set transaction isolation level serializable")
                    return await _fetch(conn, query, args)
            return await _fetch(conn, query, args)


async def _fetch(conn: psycopg.AsyncConnection[Any], query: str, args: Mapping[str, object]) -> dict[str, Any]:
    cur = conn.cursor(row_factory=tuple_row)
    await cur.execute(query.encode(), args)  # the names are checked by statement()
    row = await cur.fetchone()
    if row is None or not isinstance(row[0], dict):
        raise BadProjection("a ql_api function returned no jsonb object")
    result: dict[str, Any] = row[0]
    return result
