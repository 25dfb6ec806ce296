"""(c) Cancellation convergence: 100,000 queued Runs carrying a user cancel intent, converged by 1 and
then (on a fresh copy of the same population) 2 concurrent convergers, each its own process calling
ql_api.run_cancellation_converge_v1(128) as ql_scheduler until a page scans nothing. Seconds, Runs/s,
peak memory of each converger process (and of the backend serving it) and the database size delta.

Run as `python -m bench.convergence converge DSN` it is one converger: it connects, prints `ready`,
waits for a line on stdin, converges, and prints one JSON line about itself.

Touches: databases `converge_seed`, `converge_1`, `converge_2` (dropped at the end), its children.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

if TYPE_CHECKING:  # the converger child imports nothing it does not need (its RSS is measured)
    from bench.report import Result
    from tests.support.env import Env

LIMIT = 128
MAX_PAGES = 100_000


def status_kb(pid: int | str, key: str) -> int | None:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return None


def converger(dsn: str) -> int:
    """The child: loop ql_api.run_cancellation_converge_v1(LIMIT) until a page scans nothing."""
    pages = converged = blocked = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("select pg_backend_pid()").fetchone()
        assert row is not None
        backend = int(row[0])
        print("ready", flush=True)
        sys.stdin.readline()
        started = time.perf_counter()
        page_ms: list[float] = []
        for _ in range(MAX_PAGES):
            t = time.perf_counter()
            row = conn.execute("select ql_api.run_cancellation_converge_v1(%s)", (LIMIT,)).fetchone()
            page_ms.append((time.perf_counter() - t) * 1000)
            assert row is not None and row[0]["status"] == "ok", row
            page: dict[str, Any] = row[0]
            pages += 1
            converged += int(page["converged"])
            blocked += int(page["blocked"])
            if page["scanned"] == 0:
                break
        seconds = time.perf_counter() - started
        backend_hwm, backend_anon = status_kb(backend, "VmHWM"), status_kb(backend, "RssAnon")
    report = {
        "pages": pages,
        "converged": converged,
        "blocked": blocked,
        "seconds": seconds,
        "vmhwm_kb": status_kb("self", "VmHWM"),
        "ru_maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "backend_vmhwm_kb": backend_hwm,
        "backend_rssanon_kb": backend_anon,
        "page_ms_first": page_ms[0],
        "page_ms_p50": sorted(page_ms)[len(page_ms) // 2],
        "page_ms_max": max(page_ms),
    }
    print(json.dumps(report), flush=True)
    return 0


# -- the parent -----------------------------------------------------------------------------------


def seed(env: Env, runs: int) -> None:
    """`runs` queued Runs of a pool no Worker serves, each with a user cancel intent
    (run.queued then run.cancel_requested), set-based as the superuser."""
    from bench.cluster import make_task, queue_runs
    from tests.support.progress import say

    env.create_database("converge_seed")
    with psycopg.connect(env.dsn("converge_seed"), autocommit=True) as conn:
        task = make_task(conn, "bench", "unserved", {"argv": ["true"], "pool": "nobody"})
        started = time.perf_counter()
        queue_runs(conn, task, runs)
        row = conn.execute(
            "select count(ql.run_cancel_intent(r.id, 'user', 'user', null, ql.now_ms()))"
            " from (select id from ql.runs order by id) r"
        ).fetchone()
        assert row == (runs,), row
    env.vacuum_analyze("converge_seed")
    say(f"(c) seeded {runs:,} cancelled queued Runs in {time.perf_counter() - started:.1f} s")


CANDIDATES = (
    "select * from ql.runs r where r.cancel_requested_at_ms is not null"
    " and r.status in ('created', 'queued', 'waiting_approval', 'retry_wait', 'lost')"
    " order by r.current_attempt_id is not null, r.cancel_requested_at_ms, r.id limit 128"
    " for no key update skip locked"
)


def candidate_plan(env: Env, database: str) -> str:
    """How PostgreSQL runs one page's candidate query (copied from run_cancellation_converge_v1)."""
    with psycopg.connect(env.dsn(database), autocommit=True) as conn:
        row = conn.execute(b"explain (analyze, format json) " + CANDIDATES.encode()).fetchone()
    assert row is not None
    nodes: list[str] = []
    node: dict[str, Any] | None = row[0][0]["Plan"]
    while node is not None:
        text = str(node["Node Type"])
        if "Sort Method" in node:
            text += f" ({node['Sort Method']}, {node.get('Sort Space Used', '?')} kB {node.get('Sort Space Type', '')})"
        if node["Node Type"] == "Seq Scan":
            text += f" on {node['Relation Name']}: {node['Actual Rows']:,} rows"
        nodes.append(text)
        children = node.get("Plans") or []
        node = children[0] if children else None
    return " → ".join(nodes) + f"; {row[0][0]['Execution Time']:.0f} ms"


def converge(env: Env, database: str, n: int) -> dict[str, Any]:
    from tests.support.env import REPO

    plan = candidate_plan(env, database)
    size_before = env.database_size(database)
    dsn = env.dsn(database, "ql_scheduler")
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.convergence", "converge", dsn],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for _ in range(n)
    ]
    reports: list[dict[str, Any]] = []
    try:
        for child in children:
            assert child.stdout is not None
            if child.stdout.readline().strip() != "ready":
                raise RuntimeError("a converger did not start")
        started = time.perf_counter()
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        for child in children:
            out, _ = child.communicate(timeout=600)
            if child.returncode != 0:
                raise RuntimeError(f"a converger failed with exit code {child.returncode}")
            reports.append(json.loads(out.strip().splitlines()[-1]))
        seconds = time.perf_counter() - started
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    with psycopg.connect(env.dsn(database), autocommit=True) as conn:
        row = conn.execute(
            "select count(*) filter (where status = 'cancelled'), count(*),"
            " (select count(*) from ql.run_events where type = 'run.cancelled') from ql.runs"
        ).fetchone()
    assert row is not None
    return {
        "plan": plan,
        "convergers": n,
        "seconds": seconds,
        "children": reports,
        "cancelled": int(row[0]),
        "runs": int(row[1]),
        "events": int(row[2]),
        "size_before": size_before,
        "size_after": env.database_size(database),
    }


def run(env: Env, runs: int) -> Result:
    from bench.report import Result, fmt, ratio, table
    from tests.support.progress import say

    seed(env, runs)
    outcomes = []
    for n in (1, 2):
        database = f"converge_{n}"
        env.create_database(database, template="converge_seed")
        say(f"(c) converging {runs:,} Runs with {n} converger{'s' if n > 1 else ''} (a fresh copy of the population)")
        outcome = converge(env, database, n)
        outcomes.append(outcome)
        say(
            f"(c)   {outcome['seconds']:.1f} s, {outcome['cancelled'] / outcome['seconds']:,.0f} Runs/s, "
            f"{outcome['cancelled']:,} cancelled"
        )
        with psycopg.connect(env.dsn("postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("drop database {}").format(sql.Identifier(database)))
    with psycopg.connect(env.dsn("postgres"), autocommit=True) as conn:
        conn.execute("drop database converge_seed")

    rows = []
    for o in outcomes:
        kids = o["children"]
        rows.append(
            [
                str(o["convergers"]),
                fmt(o["seconds"], 1),
                fmt(o["cancelled"] / o["seconds"]),
                f"{o['cancelled']:,} / {o['runs']:,}",
                " + ".join(str(k["pages"]) for k in kids),
                " + ".join(f"{k['converged']:,}" for k in kids),
                " / ".join(fmt((k["vmhwm_kb"] or 0) / 1024, 1) for k in kids),
                " · ".join(f"{k['page_ms_first']:.0f} / {k['page_ms_p50']:.0f} / {k['page_ms_max']:.0f}" for k in kids),
                " / ".join(fmt((k["backend_vmhwm_kb"] or 0) / 1024, 1) for k in kids),
                " / ".join(fmt((k["backend_rssanon_kb"] or 0) / 1024, 1) for k in kids),
                fmt(o["size_before"] / 2**20, 1),
                "+" + fmt((o["size_after"] - o["size_before"]) / 2**20, 1),
            ]
        )
    main = table(
        ["convergers", "seconds", "Runs/s", "cancelled / Runs", "pages", "converged by each",
         "converger VmHWM MiB", "page ms first / p50 / max",
         "its backend's VmHWM MiB", "its backend's RssAnon at end MiB",
         "database MiB before", "size delta MiB"],
        rows,
    )  # fmt: skip
    one, two = outcomes
    speedup = ratio(two["cancelled"] / two["seconds"], one["cancelled"] / one["seconds"])
    one_maxrss = one["children"][0]["ru_maxrss_kb"] / 1024
    note = ""
    first, median = one["children"][0]["page_ms_first"], one["children"][0]["page_ms_p50"]
    if "Seq Scan" not in one["plan"]:
        note = f" An index serves the candidates (first page {first:.0f} ms, median {median:.0f} ms)."
    elif "Sort" in one["plan"]:
        note = (
            " No index serves the candidates: every page reads the whole table and sorts every Run still "
            f"waiting before it locks {LIMIT} of them (first page {first:.0f} ms, median {median:.0f} ms for "
            f"{LIMIT} Runs), so a page costs what the backlog and the table cost, not what the page does, and "
            "the whole convergence grows with the square of the backlog."
        )
    markdown = (
        "## (c) Cancellation convergence\n\n"
        f"{runs:,} queued Runs of a pool no Worker serves, each with a user cancel intent (`run.queued`, "
        "`run.cancel_requested`), written set-based by the superuser into a seed database (then VACUUM ANALYZE); "
        "each case converges a fresh copy of it (`CREATE DATABASE … TEMPLATE`). Each converger is its own "
        "process (`python -m bench.convergence converge …`) with one psycopg connection as `ql_scheduler` "
        f"looping `select ql_api.run_cancellation_converge_v1({LIMIT})` until a page scans nothing; all start "
        "together on one signal and the seconds run until the last one ends. Peak RSS is the converger's own "
        "VmHWM (`/proc/self/status`, read as it exits). Not ru_maxrss: Linux keeps the high-water mark across "
        "execve, so a child's `getrusage(RUSAGE_SELF)` (and the parent's `RUSAGE_CHILDREN`) reports the forking "
        f"parent's size ({one_maxrss:.0f} MiB here). A backend's VmHWM counts the shared buffers it touched, "
        "RssAnon its private memory.\n\n"
        f"{main}\n\n"
        f"Ratio 2 convergers / 1 converger (Runs/s): {speedup}\n\n"
        f"One page's candidate query (EXPLAIN ANALYZE on the fresh copy, before converging): {one['plan']}.{note}\n"
    )
    summary = [
        f"(c) {runs:,} Runs: 1 converger {one['seconds']:.1f} s ({one['cancelled'] / one['seconds']:,.0f}/s), "
        f"2 convergers {two['seconds']:.1f} s ({two['cancelled'] / two['seconds']:,.0f}/s); converger peak RSS "
        f"{(one['children'][0]['vmhwm_kb'] or 0) / 1024:.0f} MiB; size +"
        f"{(one['size_after'] - one['size_before']) / 2**20:.0f} MiB"
    ]
    return Result(markdown, summary, {"outcomes": outcomes})


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "converge":
        sys.exit(converger(sys.argv[2]))
    sys.exit("usage: python -m bench.convergence converge DSN")
