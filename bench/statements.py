"""pg_stat_statements per call type: reset before a window, read after it, and the table of calls, mean
time, rows, WAL and buffers per call. Touches: the cluster's pg_stat_statements (reset, read)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import psycopg

from bench.report import fmt, table
from tests.support.env import Env


@dataclass(frozen=True)
class Statement:
    """One normalised statement's counters over a window (pg_stat_statements, top-level calls)."""

    query: str
    calls: int
    mean_ms: float
    rows: int
    wal_bytes: int
    wal_records: int
    wal_fpi: int
    blocks: int  # shared buffers hit + read

    @property
    def label(self) -> str:
        """`ql_api.attempt_lease_control_v2`, else the statement's first words."""
        for word in self.query.replace("(", " ").split():
            if "." in word and word.split(".")[0] in ("ql_api", "ql", "procrastinate"):
                return word
            if word.startswith("procrastinate_"):
                return word
        return " ".join(self.query.split())[:60]


def statements_reset(env: Env) -> None:
    with psycopg.connect(env.dsn("postgres"), autocommit=True) as conn:
        conn.execute("select pg_stat_statements_reset()")


def statements(env: Env, database: str, toplevel: bool = True) -> list[Statement]:
    """The statements run in `database` since the last reset, most calls first (BEGIN/COMMIT left out)."""
    with psycopg.connect(env.dsn("postgres"), autocommit=True) as conn:
        rows = conn.execute(
            "select s.query, s.calls, s.mean_exec_time, s.rows, s.wal_bytes, s.wal_records, s.wal_fpi,"
            " s.shared_blks_hit + s.shared_blks_read"
            " from pg_stat_statements s join pg_database d on d.oid = s.dbid"
            " where d.datname = %s and s.toplevel = %s and s.calls > 0"
            " and upper(split_part(ltrim(s.query), ' ', 1)) not in ('BEGIN', 'COMMIT', 'END', 'ROLLBACK')"
            " order by s.calls desc, s.query",
            (database, toplevel),
        ).fetchall()
    return [
        Statement(str(q), int(c), float(m), int(r), int(w), int(wr), int(f), int(b)) for q, c, m, r, w, wr, f, b in rows
    ]


def statements_table(found: Sequence[Statement], per: int | None = None) -> str:
    """calls, mean execution time, rows, WAL bytes/records/full-page images per call, buffers per call;
    with `per` (the transactions or jobs of the window) also calls and WAL bytes per such unit, and without the
    statements run less than once per 100 units."""
    headers = ["call", "calls", "mean ms", "rows/call", "WAL B/call", "WAL records/call", "FPI/call", "buffers/call"]
    if per:
        headers += ["calls/unit", "WAL B/unit"]
    rows = []
    for s in found:
        if per and s.calls < per / 100:  # set-up and probes, not the measured work
            continue
        row = [f"`{s.label}`", fmt(s.calls), fmt(s.mean_ms, 3), fmt(s.rows / s.calls, 2), fmt(s.wal_bytes / s.calls),
               fmt(s.wal_records / s.calls, 1), fmt(s.wal_fpi / s.calls, 2), fmt(s.blocks / s.calls, 1)]  # fmt: skip
        if per:
            row += [fmt(s.calls / per, 2), fmt(s.wal_bytes / per)]
        rows.append(row)
    return table(headers, rows)
