"""What one Run lifecycle and one Lease renewal cost PostgreSQL, counted rather than timed: for one
lifecycle (pull → starting → renewal with the running ACK → completion, direct SQL as ql_runtime) the inner
statements (pg_stat_statements, track = all), the WAL bytes and records (pg_current_wal_lsn and
pg_stat_wal deltas), the rows written and how many updates were HOT (pg_stat_user_tables); for a renewal
its WAL beside one pgbench simple-update transaction; and the MultiXacts 8 connections renewing the
Attempts of one Worker create (the next MultiXactId of pg_control_checkpoint() around CHECKPOINTs); and the
buffers the retry scan of lease-expiry reconciliation reads with 100,000 Runs waiting, none due.

`measure(dsn)` takes a superuser DSN of a database the schema is deployed in (pg_stat_statements
preloaded for the statement count) and answers a dict of figures; `python -m bench.lifecycle_cost`
starts a throw-away fsync-on cluster of its own, deploys the schema, measures and prints them as JSON.

Touches: the database it is given (a project, a task, Workers and Runs of pool `cost`, created through
the operator functions, and 100,000 retry_wait Runs written directly, deleted after; auto_explain loaded
into one session; ql_api calls as ql_runtime; `create extension pg_stat_statements` and
pg_stat_statements_reset(); CHECKPOINT), a `pgbench` database beside it (created, initialised, kept),
and, as a command, a temporary folder under /tmp and the postgres process it starts (both removed).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg import conninfo
from psycopg.types.json import Jsonb

from qinglong.devdb import server_bindir

POOL = "cost"
LIFECYCLES = 200
HISTORY = 1000  # lifecycles before ANALYZE
RENEWALS = 500
SOAK_CONNECTIONS = 8
SOAK_RENEWALS = 250  # per connection
PULL = "select ql_api.offer_pull_v1(%s, %s, 1, %s)"
ACTIVATE = "select ql_api.attempt_activation_v1(%s, %s, %s, 1, %s, %s, %s, %s, %s, %s, null)"
RENEW = "select ql_api.attempt_lease_control_v2(%s, %s, 1, %s, %s, %s, %s, %s, %s, %s, %s)"
COMPLETE = "select ql_api.attempt_complete_v1(%s, %s, 1, %s, %s, %s, %s, %s, %s, %s, 0, null, '[]'::jsonb)"
TABLES = ("runs", "run_attempts", "run_leases", "run_events", "worker_sessions")

Row = dict[str, Any]


def scalar(conn: psycopg.Connection[Any], query: str, args: tuple[Any, ...] = ()) -> Any:
    row = conn.execute(query, args).fetchone()
    assert row is not None
    return row[0]


def _dsn(dsn: str, **changes: str) -> str:
    return conninfo.make_conninfo(dsn, **changes)


class Fixture:
    """A task of pool `cost` and enrolled Workers (each with one open session of the given capacity)."""

    def __init__(self, admin: psycopg.Connection[Any], runtime: psycopg.Connection[Any]) -> None:
        self.admin, self.runtime = admin, runtime
        project = scalar(admin, "select ql_api.project_create_v1(%s)", (f"cost-{uuid.uuid4().hex[:8]}",))
        task = scalar(
            admin,
            "select ql_api.task_create_v1(%s, %s, %s)",
            (project["projectId"], "cost-task", Jsonb({"argv": ["true"], "pool": POOL})),
        )
        self.revision = task["revisionId"]

    def worker(self, capacity: int) -> tuple[str, str]:
        worker_id, fingerprint = str(uuid.uuid4()), os.urandom(32)
        enrolled = scalar(
            self.admin,
            "select ql_api.worker_enroll_v1(%s, %s, %s, %s)",
            (worker_id, f"cost-{worker_id[:8]}", POOL, fingerprint),
        )
        assert enrolled["status"] == "enrolled", enrolled
        opened = scalar(
            self.runtime,
            "select ql_api.worker_session_open_v1(%s, 1, %s, %s)",
            (worker_id, fingerprint, capacity),
        )
        assert opened["status"] == "opened", opened
        return worker_id, str(opened["sessionId"])

    def queue(self, count: int) -> None:
        """`count` queued Runs (each with its run.queued event), as bench/cluster.py queues them."""
        with self.admin.transaction():
            self.admin.execute(
                "with r as (insert into ql.runs (project_id, task_id, task_revision_id, pool, status, queued_at_ms,"
                "    created_at_ms)"
                "  select t.project_id, t.task_id, t.id, %s, 'created', ql.now_ms() + g, ql.now_ms()"
                "    from ql.task_execution_revisions t cross join generate_series(1, %s) g where t.id = %s"
                "  returning id)"
                " select count(ql.run_event(r.id, 'queued', 'run.queued', 'system', null, null, '{}', ql.now_ms(),"
                "  'run.queued:' || r.id::text)) from r",
                (POOL, count, self.revision),
            )


One = Callable[[psycopg.Connection[Any], str, tuple[Any, ...]], Any]


def started_attempt(
    rt: psycopg.Connection[Any], worker: str, session: str, one: One = scalar
) -> tuple[tuple[Any, ...], int]:
    """Pull and ACK starting: the fence arguments and the Lease version."""
    digest = hashlib.sha256(os.urandom(32)).digest()
    pulled = one(rt, PULL, (worker, session, digest))
    assert pulled["status"] == "offered", pulled
    o = pulled["offer"]
    fence = (o["projectId"], o["runId"], o["attemptId"], o["offerId"], o["leaseGeneration"], digest)
    starting = one(rt, ACTIVATE, ("starting", worker, session, *fence))
    assert starting["status"] == "applied", starting
    return fence, int(starting["snapshot"]["leaseVersion"])


def running_attempt(
    rt: psycopg.Connection[Any], worker: str, session: str, one: One = scalar
) -> tuple[tuple[Any, ...], int]:
    """A started Attempt's first renewal, which takes the running ACK along: the fence and the Lease version."""
    fence, version = started_attempt(rt, worker, session, one)
    renewed = one(rt, RENEW, (worker, session, *fence, version, True))
    assert renewed["status"] == "renewed", renewed
    return fence, int(renewed["leaseVersion"])


def one_lifecycle(rt: psycopg.Connection[Any], worker: str, session: str, one: One = scalar) -> None:
    fence, version = running_attempt(rt, worker, session, one)
    done = one(rt, COMPLETE, (worker, session, *fence, version))
    assert done["runStatus"] == "succeeded", done


def _fence_loop_us(admin: psycopg.Connection[Any], worker: str, session: str, fence: tuple[Any, ...]) -> float:
    """µs a call of ql.attempt_fence takes in a loop inside ONE transaction (its locks, snapshot and plans then
    already there): what the fence itself costs, beside what a call pays per transaction."""
    notices: list[str] = []
    admin.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    with admin.transaction():
        admin.execute(
            "create temporary table fence_args on commit drop as select %s::uuid w, %s::uuid s, %s::uuid p,"
            " %s::uuid r, %s::uuid a, %s::uuid o, %s::bigint g, %s::bytea d",
            (worker, session, *fence),
        )
        admin.execute(
            "do $$ declare x record; f record; t timestamptz; begin select * into x from fence_args;"
            " for i in 1..200 loop select * into f from ql.attempt_fence(x.w, x.s, 1, x.p, x.r, x.a, x.o, x.g, x.d);"
            " end loop; t := clock_timestamp();"
            " for i in 1..2000 loop select * into f from ql.attempt_fence(x.w, x.s, 1, x.p, x.r, x.a, x.o, x.g, x.d);"
            " end loop; raise notice '%', extract(epoch from clock_timestamp() - t) * 1e6 / 2000; end $$"
        )
    return float(notices[-1])


def _relation_locks(rt: psycopg.Connection[Any], worker: str, session: str) -> list[tuple[str, int, int]]:
    """One lifecycle, each call in a transaction that counts, before it commits, the tables and indexes it holds
    a lock on, and how many of its locks went through the shared lock table (beyond the per-backend fast path):
    (call, relations, shared)."""
    found: list[tuple[str, int, int]] = []

    def counted(conn: psycopg.Connection[Any], query: str, args: tuple[Any, ...]) -> Any:
        with conn.transaction():
            answer = scalar(conn, query, args)
            locks, shared = conn.execute(
                "select count(distinct relation), count(*) filter (where not fastpath) from pg_locks"
                " where pid = pg_backend_pid() and locktype = 'relation'"
            ).fetchone() or (0, 0)
        found.append((query.split("(")[0].removeprefix("select ql_api."), int(locks), int(shared)))
        return answer

    one_lifecycle(rt, worker, session, counted)
    return found


class _Counters:
    """Cluster-wide counters read by the superuser connection; `delta()` since `__init__`. The measured
    connection flushes its statistics first (pg_stat_force_next_flush and one statement)."""

    def __init__(self, admin: psycopg.Connection[Any], measured: psycopg.Connection[Any]) -> None:
        self.admin, self.measured = admin, measured
        self.start = self._read()

    def _read(self) -> Row:
        self.measured.execute("select pg_stat_force_next_flush()")
        self.measured.execute("select 1")
        self.admin.execute("select pg_stat_clear_snapshot()")
        row = self.admin.execute(
            "select pg_current_wal_insert_lsn(), w.wal_records, w.wal_fpi,"
            "  (select coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::bigint from pg_stat_user_tables"
            "    where schemaname = 'ql'),"
            "  (select coalesce(sum(n_tup_upd), 0)::bigint from pg_stat_user_tables where schemaname = 'ql'),"
            "  (select coalesce(sum(n_tup_hot_upd), 0)::bigint from pg_stat_user_tables where schemaname = 'ql'),"
            "  (select jsonb_object_agg(relname, jsonb_build_array(n_tup_upd, n_tup_hot_upd))"
            "     from pg_stat_user_tables where schemaname = 'ql' and relname = any(%s))"
            " from pg_stat_wal w",
            (list(TABLES),),
        ).fetchone()
        assert row is not None
        lsn, records, fpi, written, updated, hot, per_table = row
        return {
            "lsn": lsn,
            "records": records,
            "fpi": fpi,
            "written": written,
            "updated": updated,
            "hot": hot,
            "tables": per_table,
        }

    def delta(self) -> Row:
        end = self._read()
        wal = scalar(self.admin, "select pg_wal_lsn_diff(%s, %s)", (end["lsn"], self.start["lsn"]))
        tables = {name: [end["tables"][name][i] - self.start["tables"][name][i] for i in (0, 1)] for name in TABLES}
        return {
            "wal_bytes": float(wal),
            "wal_records": end["records"] - self.start["records"],
            "wal_fpi": end["fpi"] - self.start["fpi"],
            "rows_written": end["written"] - self.start["written"],
            "rows_updated": end["updated"] - self.start["updated"],
            "hot_updates": end["hot"] - self.start["hot"],
            "updates_hot_by_table": tables,
        }


def _statements(admin: psycopg.Connection[Any]) -> tuple[int, int] | None:
    """(inner statements, ql_api calls) pg_stat_statements counted since its reset; None without it. Inner
    statements run as the functions' owner (security definer), so every nested statement counts."""
    if scalar(admin, "select count(*) from pg_extension where extname = 'pg_stat_statements'") == 0:
        return None
    row = admin.execute(
        "select coalesce(sum(calls) filter (where not toplevel), 0)::bigint,"
        "  coalesce(sum(calls) filter (where toplevel and query like 'select ql_api.%%'), 0)::bigint"
        " from pg_stat_statements"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _next_multixact(admin: psycopg.Connection[Any]) -> int:
    admin.execute("checkpoint")
    return int(scalar(admin, "select next_multixact_id::text::bigint from pg_control_checkpoint()"))


def lifecycle(dsn: str, count: int = LIFECYCLES, history: int = HISTORY) -> Row:
    """Per lifecycle, the mean over `count` (after `history` lifecycles, VACUUM ANALYZE and `count` unmeasured
    ones): statements, WAL, rows, and where its execution time goes: each inner statement's µs per lifecycle
    (`inner`, most first). The calls run in a superuser session that sets pg_stat_statements.track = all for
    itself, then `set role ql_runtime`."""
    with (
        psycopg.connect(dsn, autocommit=True) as admin,
        psycopg.connect(dsn, autocommit=True) as rt,
    ):
        has_pgss = _statements(admin) is not None
        if has_pgss:
            rt.execute("set pg_stat_statements.track = 'all'")
            rt.execute("set pg_stat_statements.track_planning = on")
        rt.execute("set role ql_runtime")
        fix = Fixture(admin, rt)
        worker, session = fix.worker(1)
        fix.queue(count * 9 // 4 + history + 1)
        for _ in range(history):  # the statistics then know Attempts, Leases, Offers and events
            one_lifecycle(rt, worker, session)
        admin.execute("vacuum analyze")  # (cached plans are made again after it)
        for _ in range(count):  # warm: cached plans, pages already written since the checkpoint below
            one_lifecycle(rt, worker, session)
        if has_pgss:
            admin.execute("select pg_stat_statements_reset()")
        counters = _Counters(admin, rt)
        for _ in range(count):
            one_lifecycle(rt, worker, session)
        d = counters.delta()
        stmts = _statements(admin) if has_pgss else None
        inner = _inner(admin) if has_pgss else []
        replanned = _replanned(admin, count) if has_pgss else []
        locks = _relation_locks(rt, worker, session)
        fence, _ = started_attempt(rt, worker, session)
        loop_us = _fence_loop_us(admin, worker, session, fence)
        run_indexes = scalar(admin, "select count(*) from pg_index where indrelid = 'ql.runs'::regclass")
        event_partitions = scalar(admin, "select count(*) from pg_inherits where inhparent = 'ql.run_events'::regclass")
    out: Row = {k: v / count for k, v in d.items() if k != "updates_hot_by_table"}
    out["updates_hot_by_table"] = {k: [v[0] / count, v[1] / count] for k, v in d["updates_hot_by_table"].items()}
    if stmts is not None:
        out["inner_statements"] = stmts[0] / count
        out["calls"] = stmts[1] / count
        out["inner"] = [(query, calls / count, ms * 1000 / count) for query, calls, ms in inner]
        out["replanned"] = replanned
    out["relation_locks"] = locks
    out["fence_loop_us"] = loop_us
    out["run_indexes"], out["event_partitions"] = run_indexes, event_partitions
    return out


def _replanned(admin: psycopg.Connection[Any], count: int) -> list[str]:
    """The inner statements planned on (nearly) every execution over `count` lifecycles: PL/pgSQL keeps a
    statement's custom plans when they look cheaper than its generic one (a parameter that folds part of it away),
    and then plans it anew on every call (decision 0031). A lifecycle should have none."""
    rows = admin.execute(
        "select regexp_replace(query, '\\s+', ' ', 'g') from pg_stat_statements"
        " where not toplevel and calls >= %s and plans >= calls * 0.9"
        " and dbid = (select oid from pg_database where datname = current_database())",
        (count,),
    ).fetchall()
    return [str(q)[:140] for (q,) in rows]


def _inner(admin: psycopg.Connection[Any]) -> list[tuple[str, int, float]]:
    """(statement, calls, total execution ms) of every inner statement since the reset, most time first. A
    statement's time includes the statements it runs (a nested function call's time counts its body too)."""
    rows = admin.execute(
        "select regexp_replace(query, '\\s+', ' ', 'g'), calls::bigint, total_exec_time from pg_stat_statements"
        " where not toplevel and calls > 0 and dbid = (select oid from pg_database where datname = current_database())"
        " order by total_exec_time desc"
    ).fetchall()
    return [(str(q), int(c), float(t)) for q, c, t in rows]


def _pgbench_wal(dsn: str, transactions: int) -> Row:
    """WAL of one pgbench builtin simple-update transaction (one client, the mean of `transactions`), after
    a warm pass (synchronous_commit off, 20,000 transactions) wrote every page's full image already, as the
    renewals' pages were: the steady state, not the first touch after a checkpoint."""
    info = conninfo.conninfo_to_dict(dsn)
    with psycopg.connect(_dsn(dsn, dbname="postgres"), autocommit=True) as conn:
        if scalar(conn, "select count(*) from pg_database where datname = 'pgbench'") == 0:
            conn.execute("create database pgbench")
    base = [str(server_bindir() / "pgbench"), "-h", str(info.get("host")), "-p", str(info.get("port", 5432))]
    base += ["-U", str(info.get("user", "postgres"))]
    subprocess.run([*base, "-i", "-q", "-s", "1", "pgbench"], capture_output=True, check=True)
    run = [*base, "-N", "-M", "prepared", "-n"]
    warm = dict(os.environ, PGOPTIONS="-c synchronous_commit=off")
    subprocess.run([*run, "-c", "4", "-j", "2", "-t", "5000", "pgbench"], capture_output=True, check=True, env=warm)
    with psycopg.connect(dsn, autocommit=True) as admin:
        start = admin.execute("select pg_current_wal_insert_lsn(), wal_records, wal_fpi from pg_stat_wal").fetchone()
        assert start is not None
        subprocess.run([*run, "-c", "1", "-t", str(transactions), "pgbench"], capture_output=True, check=True)
        admin.execute("select pg_stat_clear_snapshot()")
        end = admin.execute(
            "select pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s), wal_records - %s, wal_fpi - %s from pg_stat_wal",
            start,
        ).fetchone()
        assert end is not None
    return {
        "wal_bytes": float(end[0]) / transactions,
        "wal_records": end[1] / transactions,
        "wal_fpi": end[2] / transactions,
    }


def renewal(dsn: str, count: int = RENEWALS) -> Row:
    """One connection renewing one running Attempt `count` times: WAL bytes and records per renewal, and
    the same for one pgbench simple-update transaction on this cluster."""
    with (
        psycopg.connect(dsn, autocommit=True) as admin,
        psycopg.connect(_dsn(dsn, user="ql_runtime"), autocommit=True) as rt,
    ):
        fix = Fixture(admin, rt)
        worker, session = fix.worker(1)
        fix.queue(1)
        fence, version = running_attempt(rt, worker, session)

        def renew_n(n: int) -> None:
            nonlocal version
            for _ in range(n):
                renewed = scalar(rt, RENEW, (worker, session, *fence, version, False))
                assert renewed["status"] == "renewed", renewed
                version = int(renewed["leaseVersion"])

        renew_n(count)
        counters = _Counters(admin, rt)
        renew_n(count)
        d = counters.delta()
    pgbench = _pgbench_wal(dsn, count)
    return {
        "wal_bytes": d["wal_bytes"] / count,
        "wal_records": d["wal_records"] / count,
        "rows_written": d["rows_written"] / count,
        "hot_updates": d["hot_updates"] / count,
        "wal_fpi": d["wal_fpi"] / count,
        "pgbench": pgbench,
        "wal_over_pgbench": d["wal_bytes"] / count / pgbench["wal_bytes"],
    }


def multixacts(dsn: str, connections: int = SOAK_CONNECTIONS, renewals: int = SOAK_RENEWALS) -> Row:
    """`connections` connections, each renewing its own running Attempt of ONE Worker (one session),
    `renewals` times at once: MultiXacts created (next MultiXactId delta) per renewal."""
    with (
        psycopg.connect(dsn, autocommit=True) as admin,
        psycopg.connect(_dsn(dsn, user="ql_runtime"), autocommit=True) as rt,
    ):
        fix = Fixture(admin, rt)
        worker, session = fix.worker(connections)
        fix.queue(connections)
        started = [running_attempt(rt, worker, session) for _ in range(connections)]
        errors: list[BaseException] = []
        barrier = threading.Barrier(connections)

        def soak(fence: tuple[Any, ...], version: int) -> Callable[[], None]:
            def run() -> None:
                try:
                    with psycopg.connect(_dsn(dsn, user="ql_runtime"), autocommit=True) as conn:
                        v = version
                        barrier.wait()
                        for _ in range(renewals):
                            renewed = scalar(conn, RENEW, (worker, session, *fence, v, False))
                            assert renewed["status"] == "renewed", renewed
                            v = int(renewed["leaseVersion"])
                except BaseException as exc:  # reported below
                    errors.append(exc)

            return run

        before = _next_multixact(admin)
        threads = [threading.Thread(target=soak(f, v)) for f, v in started]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        after = _next_multixact(admin)
        if errors:
            raise errors[0]
    total = connections * renewals
    return {
        "connections": connections,
        "renewals": total,
        "multixacts": after - before,
        "multixacts_per_renewal": (after - before) / total,
    }


def retry_scan(dsn: str, waiting: int = 100_000) -> Row:
    """`waiting` retry_wait Runs due in an hour (none due), analysed: the shared buffers the retry step of
    ql_api.lease_expiry_reconcile_v1 reads, from its own statement's executed plan (auto_explain, nested
    statements, as the superuser loads it; the cycle runs as ql_scheduler)."""
    plans: list[Row] = []

    def keep(diagnostic: psycopg.errors.Diagnostic) -> None:
        text = diagnostic.message_primary or ""
        if "plan:" in text:
            plans.append(json.loads(text.split("plan:", 1)[1]))

    with psycopg.connect(dsn, autocommit=True) as admin:
        fix = Fixture(admin, admin)
        admin.execute(
            "insert into ql.runs (project_id, task_id, task_revision_id, pool, status, queued_at_ms, created_at_ms,"
            "                     retry_at_ms)"
            " select t.project_id, t.task_id, t.id, %s, 'retry_wait', ql.now_ms(), ql.now_ms(),"
            "        ql.now_ms() + 3600000 + g"
            "   from generate_series(1, %s) g join ql.task_execution_revisions t on t.id = %s",
            (POOL, waiting, fix.revision),
        )
        admin.execute("vacuum (analyze) ql.runs")
        admin.add_notice_handler(keep)
        admin.execute("load 'auto_explain'")
        for setting, value in (("log_min_duration", "0"), ("log_nested_statements", "on"), ("log_analyze", "on"),
                               ("log_buffers", "on"), ("log_timing", "off"), ("log_format", "json"),
                               ("log_level", "notice")):  # fmt: skip
            admin.execute(f"set auto_explain.{setting} = {value}")
        admin.execute("set role ql_scheduler")
        answer = scalar(admin, "select ql_api.lease_expiry_reconcile_v1(128, 0)")
        admin.execute("reset role")
        admin.execute("delete from ql.runs where pool = %s and status = 'retry_wait'", (POOL,))

    def buffers(node: Row) -> int:
        return int(node.get("Shared Hit Blocks", 0)) + int(node.get("Shared Read Blocks", 0))

    scans = [p for p in plans if " ".join(p["Query Text"].split()).startswith("select * from ql.runs r where r.cancel")]
    assert len(scans) == 1 and answer["scanned"] == 0, (answer, [p["Query Text"][:60] for p in plans])
    return {"waiting": waiting, "buffers": buffers(scans[0]["Plan"])}


def measure(dsn: str) -> Row:
    """Every figure of this module over the database `dsn` names (superuser; the schema deployed)."""
    return {
        "lifecycle": lifecycle(dsn),
        "renewal": renewal(dsn),
        "soak": multixacts(dsn),
        "retry_scan": retry_scan(dsn),
    }


def main() -> None:
    from qinglong.db import sqitch
    from qinglong.devdb import Cluster

    root = Path(tempfile.mkdtemp(prefix="qinglong-cost-", dir="/tmp"))
    root.chmod(0o755)
    settings = {"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.track": "all"}
    cluster = Cluster(root / "pg", fsync=True, preload_cron=False, settings=settings)
    try:
        cluster.start()
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            conn.execute("create database qinglong")
        subprocess.run(sqitch("deploy", "--quiet", cluster.sqitch_target("qinglong")), check=True, capture_output=True)
        with psycopg.connect(cluster.dsn("qinglong"), autocommit=True) as conn:
            conn.execute("create extension pg_stat_statements")
            conn.execute("update ql.settings set session_ttl_ms = 3600000, lease_ttl_ms = 3600000")
        print(json.dumps(measure(cluster.dsn("qinglong")), indent=2, sort_keys=True))
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
