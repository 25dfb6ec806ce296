"""The shell's one door to PostgreSQL: a psycopg AsyncConnectionPool connected as ql_runtime, and
calls of ql_api functions by name. The only module of the shell that imports psycopg.

A call is `select ql_api.<function>(p_a => $1, …)`: named notation with bind parameters, its text made once
per function and parameter names (`statement`). The function and parameter names come from the route table
(checked as identifiers here), never from a request, and no other SQL is ever built here. Raw tokens and
session keys never reach it (only their SHA-256 digests do). A serializable call retries 40001 and 40P01 a
bounded number of times.

A grouped call (a route that says so: routes.Route.grouped) joins the next group of its function. A group
takes a connection from the pool, then every call of that function queued by then — those of one event-loop
turn at least, and while every connection is busy all that arrived meanwhile (group commit) — and runs them
as one statement, `select ql_api.f(…), ql_api.f(…), …` (at most GROUP_MAX, the oldest; in the order of their
arguments so that concurrent groups lock rows in one order), in one transaction, each call's jsonb its own
answer. A fence or an invalid request is an answer, not an error, so it changes nothing for its neighbours;
when the statement fails in the database (an error raised by one call, a conflict) it rolled back as a whole
and every call runs again on its own, one after the other on that connection; when the connection fails (the
statement's fate unknown) or the database cannot serve, every call fails as it would alone. One round trip
and one commit for the group instead of one per call: what a renewal costs the shell and PostgreSQL
(bench/RESULTS.md) is mostly the round trip and the commit.

A failure is classified by its SQLSTATE (docs/operations.md §10): the database cannot serve now
(UNAVAILABLE: a lost or refused connection, a shutdown, a read-only standby after a failover) is
`StorageUnavailable` (503 storage.unavailable); a transaction still conflicting after the retries
(CONFLICT) is `StorageConflict` (503 storage.conflict); anything else is a bug, `DatabaseFault` (500
internal.error). Each keeps the SQLSTATE and the error's class name only, never its message, which
can quote a parameter.

Transaction pooling (pgbouncer pool_mode=transaction) works: nothing the shell does outlives a
transaction. Every call is one autocommit statement, or the serializable call's own transaction (its
`set transaction` inside it); the functions take only pg_advisory_xact_lock and set search_path per
function; there is no LISTEN, no temporary table, no SET of the session; the role settings apply at
each server login. The one piece of session state is psycopg's prepared statements, which
`prepared_statements=False` turns off (shell.toml, [database]). A pooled connection whose server
closed it (a terminated backend, a restart, a failover) is noticed when it is handed out, and then
every connection opened before is replaced (`Database._check`).
"""

from __future__ import annotations

import asyncio
import functools
import random
import re
import select
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from qinglong.shell.config import ShellConfig
from qinglong.shell.metrics import DB_GROUP, DB_LATENCY, child

_FUNCTION: Final = re.compile(r"[a-z_][a-z0-9_]*_v[0-9]+")
_PARAMETER: Final = re.compile(r"p_[a-z0-9_]+")
SERIALIZABLE_ATTEMPTS: Final = 5
# SQLSTATE classes and codes: connection exception (08), insufficient resources (53), operator intervention
# (57: shutdown, cannot connect now, a statement timeout) and read_only_sql_transaction (a standby).
UNAVAILABLE: Final = ("08", "53", "57", "25006")
CONFLICT: Final = ("40001", "40P01")  # serialization_failure, deadlock_detected
_RETRIED: Final = (pg_errors.SerializationFailure, pg_errors.DeadlockDetected)
GROUP_MAX: Final = 64  # calls in one grouped statement


class StorageError(Exception):
    """A call that failed in the database or on the way to it: the SQLSTATE (None when the client saw the
    failure itself: a lost connection, no pooled connection in time) and the error's class name."""

    def __init__(self, sqlstate: str | None, error: str) -> None:
        super().__init__(f"{error} (SQLSTATE {sqlstate})")
        self.sqlstate, self.error = sqlstate, error


class StorageUnavailable(StorageError):
    """The database cannot serve now (UNAVAILABLE, or no SQLSTATE on a connection fault): retry later."""


class StorageConflict(StorageError):
    """A transaction that still conflicted with concurrent ones after the shell's retries: retry."""


class StoragePartitionMissing(StorageError):
    """A row stamped with a time no partition of its table covers (SQLSTATE 23514 'no partition of relation'):
    partition maintenance has not run for over a year (ql_api.storage_health_v1 warned for ten months)."""


class DatabaseFault(StorageError):
    """Any other failure: a bug in the deployed SQL or in how it is called (42883 undefined_function,
    P0001 a raise, 22xxx a data exception, 26000 a prepared statement a transaction pooler lost)."""


class BadProjection(Exception):
    """A ql_api function answered something that is not a JSON object."""


def classify(exc: psycopg.Error) -> StorageError:
    """The StorageError of a psycopg failure, by its SQLSTATE."""
    state, name = exc.sqlstate, type(exc).__name__
    if state is None:  # raised by psycopg itself: a connection fault (PoolTimeout included) or a client-side bug
        return (
            StorageUnavailable(None, name) if isinstance(exc, psycopg.OperationalError) else DatabaseFault(None, name)
        )
    if state.startswith(UNAVAILABLE):
        return StorageUnavailable(state, name)
    if state in CONFLICT:
        return StorageConflict(state, name)
    if state == "23514" and (exc.diag.message_primary or "").startswith("no partition of relation"):
        return StoragePartitionMissing(state, name)
    return DatabaseFault(state, name)


def jsonb(value: object) -> object:
    """A route's argument that is a JSON array or object, bound as jsonb (psycopg's adapter stays here)."""
    return Jsonb(value)


@functools.lru_cache(maxsize=256)
def statement(function: str, names: tuple[str, ...], count: int = 1) -> bytes:
    """`select ql_api.<function>(p_a => $1, …), ql_api.<function>(p_a => $k+1, …), …`: `count` calls in named
    notation with PostgreSQL's own placeholders, once the function and every parameter name are identifiers
    (a raw cursor sends it as it is: psycopg parses no query text per call)."""
    if not _FUNCTION.fullmatch(function):
        raise ValueError(f"not a ql_api function name: {function!r}")
    if not all(_PARAMETER.fullmatch(name) for name in names):
        raise ValueError(f"not parameter names of ql_api.{function}")
    calls = (
        f"ql_api.{function}({', '.join(f'{name} => ${i * len(names) + j + 1}' for j, name in enumerate(names))})"
        for i in range(count)
    )
    return ("select " + ", ".join(calls)).encode()


_Queued = tuple[Mapping[str, object], "asyncio.Future[dict[str, Any]]"]


def _settle(future: asyncio.Future[dict[str, Any]], result: object) -> None:
    """Answer one queued call (unless its request went away): its jsonb, or the exception to raise."""
    if future.done():
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    elif isinstance(result, dict):
        future.set_result(result)
    else:
        future.set_exception(BadProjection("a ql_api function returned no jsonb object"))


class Database:
    """Calls ql_api functions through one pool (sized to the cores, as docs/architecture.md §12 says).
    `prepared_statements=False` for a transaction pooler that keeps none (pgbouncer before 1.21, or without
    max_prepared_statements): psycopg then never prepares."""

    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 4,
        timeout: float = 5.0,
        prepared_statements: bool = True,
        application_name: str = "qinglong-shell",
    ) -> None:
        kwargs: dict[str, Any] = {"autocommit": True, "application_name": application_name}
        if not prepared_statements:
            kwargs["prepare_threshold"] = None
        self._pool = AsyncConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            open=False,
            kwargs=kwargs,
            check=self._check,
        )
        self._queued: dict[tuple[str, tuple[str, ...]], list[_Queued]] = {}
        self._waiting: set[tuple[str, tuple[str, ...]]] = set()  # keys whose next group waits for a connection
        self._groups: set[asyncio.Task[None]] = set()

    @classmethod
    def of(cls, config: ShellConfig) -> Database:
        """The pool shell.toml's [database] describes."""
        return cls(config.dsn, max_size=config.pool_size, prepared_statements=config.prepared_statements)

    async def open(self) -> None:
        await self._pool.open(wait=False)

    async def close(self) -> None:
        await self._pool.close()

    async def _check(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Run by the pool before it hands `conn` out. An idle connection is never written to until the server
        closes it, so only one whose socket is readable costs a round trip (an empty query). If that fails, the
        server went away (a terminated backend, a restart, a failover) and took the other connections with it:
        all are replaced at once (otherwise each dead one would cost the request psycopg_pool's back-off of 1,
        2, 4… s), and the pool hands out a new one."""
        try:
            waiting = select.poll()
            waiting.register(conn.pgconn.socket, select.POLLIN)  # POLLHUP and POLLERR are always reported
            if not waiting.poll(0):
                return
            await conn.execute("")
        except (psycopg.Error, OSError):
            await self._pool.drain()
            raise

    async def healthy(self) -> bool:
        """True when a pooled connection answers a trivial probe (the one statement that is no API call)."""
        try:
            async with self._pool.connection(timeout=2.0) as conn:
                await conn.execute("select 1")
        except (psycopg.OperationalError, PoolTimeout):
            return False
        return True

    async def call(
        self, function: str, args: Mapping[str, object], *, serializable: bool = False, grouped: bool = False
    ) -> dict[str, Any]:
        """Call ql_api.<function>(name => value, …) in its own transaction (grouped: in its function's next group)
        and return its jsonb result."""
        started = time.perf_counter()
        try:
            if grouped and not serializable:
                return await self._grouped(function, args)
            query, values = statement(function, tuple(args)), list(args.values())
            for attempt in range(1, SERIALIZABLE_ATTEMPTS + 1):
                try:
                    return await self._once(query, values, serializable)
                except _RETRIED:
                    if not serializable or attempt == SERIALIZABLE_ATTEMPTS:
                        raise
                    await asyncio.sleep(random.uniform(0.001, 0.005) * attempt)  # noqa: S311 - jitter
            raise AssertionError("unreachable")
        except psycopg.Error as exc:  # PoolTimeout is a psycopg.OperationalError
            raise classify(exc) from None
        finally:
            child(DB_LATENCY, function).observe(time.perf_counter() - started)

    async def _grouped(self, function: str, args: Mapping[str, object]) -> dict[str, Any]:
        """Queue the call for the next group of `function` (the first call queued schedules that group)."""
        key = (function, tuple(args))
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._queued.setdefault(key, []).append((args, future))
        if key not in self._waiting:
            self._schedule(key)
        return await future

    def _schedule(self, key: tuple[str, tuple[str, ...]]) -> None:
        self._waiting.add(key)
        task = asyncio.ensure_future(self._group(key))
        self._groups.add(task)
        task.add_done_callback(self._groups.discard)

    async def _group(self, key: tuple[str, tuple[str, ...]]) -> None:
        """Take a connection, then every call of `key` queued by then (at most GROUP_MAX, the oldest; the rest
        make the next group) and run them as one statement, in the order of their arguments."""
        function, names = key
        queued: list[_Queued] = []
        try:
            async with self._pool.connection() as conn:
                self._waiting.discard(key)
                waiting = self._queued.pop(key, [])
                queued, rest = waiting[:GROUP_MAX], waiting[GROUP_MAX:]
                if rest:
                    self._queued[key] = rest
                    self._schedule(key)
                queued.sort(key=lambda q: tuple(str(v) for v in q[0].values()))
                child(DB_GROUP, function).observe(len(queued))
                await self._run_group(conn, function, names, queued)
        except psycopg.Error as exc:  # no connection (PoolTimeout), or it failed: each fails as it would alone
            for _, future in queued or self._take(key):
                _settle(future, exc)
        finally:  # a bug or a cancelled task (shutdown) never leaves a request waiting
            for _, future in queued or self._take(key):
                _settle(future, RuntimeError("the group ended without this call's answer"))

    def _take(self, key: tuple[str, tuple[str, ...]]) -> list[_Queued]:
        """The calls still queued for a group that never got a connection."""
        self._waiting.discard(key)
        return self._queued.pop(key, [])

    async def _run_group(
        self, conn: psycopg.AsyncConnection[Any], function: str, names: tuple[str, ...], queued: list[_Queued]
    ) -> None:
        if len(queued) == 1:
            await self._alone(conn, function, *queued[0])
            return
        values = [args[name] for args, _ in queued for name in names]
        try:
            cur = psycopg.AsyncRawCursor(conn, row_factory=tuple_row)
            await cur.execute(statement(function, names, len(queued)), values)
            row = await cur.fetchone()
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.OperationalError) or (exc.sqlstate or "").startswith(UNAVAILABLE):
                for _, future in queued:  # its fate unknown, or nothing can run now: each fails as alone
                    _settle(future, exc)
            else:  # rolled back as a whole: each call again, alone, one after the other on this connection
                for args, future in queued:
                    await self._alone(conn, function, args, future)
            return
        answers = row if row is not None and len(row) == len(queued) else [None] * len(queued)
        for (_, future), answer in zip(queued, answers, strict=True):
            _settle(future, answer)

    async def _alone(
        self,
        conn: psycopg.AsyncConnection[Any],
        function: str,
        args: Mapping[str, object],
        future: asyncio.Future[dict[str, Any]],
    ) -> None:
        try:
            _settle(future, await _fetch(conn, statement(function, tuple(args)), list(args.values())))
        except (psycopg.Error, BadProjection) as exc:
            _settle(future, exc)

    async def _once(self, query: bytes, values: Sequence[object], serializable: bool) -> dict[str, Any]:
        async with self._pool.connection() as conn:
            if serializable:
                async with conn.transaction():
                    await conn.execute("set transaction isolation level serializable")
                    return await _fetch(conn, query, values)
            return await _fetch(conn, query, values)


async def _fetch(conn: psycopg.AsyncConnection[Any], query: bytes, values: Sequence[object]) -> dict[str, Any]:
    """The one jsonb object `query` (a statement() of one call) answers with `values` bound."""
    cur = psycopg.AsyncRawCursor(conn, row_factory=tuple_row)
    await cur.execute(query, values)
    row = await cur.fetchone()
    if row is None or not isinstance(row[0], dict):
        raise BadProjection("a ql_api function returned no jsonb object")
    result: dict[str, Any] = row[0]
    return result
