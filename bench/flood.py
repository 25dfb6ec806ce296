"""(f) The shell under connection floods, with its default budgets (qinglong.shell.config.BUDGETS), in
three phases while one enrolled Worker renews a Lease on the worker listener with the Worker protocol
(session, pull, starting, running, then lease control every 0.2 s, every tenth on a new TLS connection):
1. 2,000 clients that open TLS connections to the user listener and send nothing, and 100 slowloris clients
   that drip a never-ending request head into it one byte every 0.3 s (each reconnects when closed, and
   after a refusal waits 1 to 2 s);
2. 200 clients from 127.0.0.2 that handshake with the worker listener without a client certificate (refused
   by the shell at the end of each handshake), each again at once, for HANDSHAKE_S
   (tests.support.handshakes);
3. the same with the Worker's own certificate (every handshake succeeds; the client then closes).
Measured: the Worker's renewals (ok, failed, p99); the shell's RSS when idle (after the Worker's session
opened), its peak in each phase (VmHWM, reset at the start of each), 60 s after the last phase; the bound
the user listener's budget gives phase 1 (idle RSS + max_connections x (the RSS of one idle TLS connection,
measured first with 100 of them, + max_header_bytes)) and the ceiling of every phase, twice the idle RSS;
and the budget hits the shell counted. Written to bench/results.json under "flood" and as section (f) of
RESULTS.md.

Touches: the `flood` database (one Worker, one Task, one Run), a shell process of its own, loopback
sockets (this process raises its own soft RLIMIT_NOFILE for them), /proc/<shell pid> (reads; resets its
VmHWM), bench/results.json.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import resource
import ssl
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp
import psycopg

from bench.cluster import enroll, make_task, queue_runs
from bench.lease_renewals import SimWorker
from bench.meters import status_kb
from bench.report import Result, percentile, record_json, table
from qinglong.shell.config import BUDGETS
from qinglong.wire import ActivationRequest, LeaseControlRequest, OfferPullRequest
from tests.support.env import Env, Identity, ShellProcess
from tests.support.handshakes import Flood, handshake_flood, reset_peak, status_mib
from tests.support.progress import say

IDLE_CLIENTS: Final = 2000
SLOWLORIS_CLIENTS: Final = 100
DRIP_S: Final = 0.3
RENEW_EVERY_S: Final = 0.2
NEW_CONNECTION_EVERY: Final = 10  # renewals
CALIBRATION_CONNECTIONS: Final = 100
RAMP_S: Final = 5.0  # the flood's clients start spread over this long
HANDSHAKE_CLIENTS: Final = 200
HANDSHAKE_S: Final = 10.0
AFTER_S: Final = 60.0  # RSS read this long after the last phase
CEILING: Final = 2.0  # x the idle RSS: the bound docs/operations.md states for any of these floods
RETURN: Final = 1.2  # x the idle RSS: where the RSS must be back within AFTER_S
_HIT = re.compile(r'^qinglong_shell_budget_hits_total\{budget="([a-z_]+)",listener="([a-z]+)"\} ([0-9.e+]+)$', re.M)


@dataclass
class Counts:
    accepted: int = 0  # TLS handshakes that completed
    refused: int = 0  # connections closed before the handshake completed
    closed_by_shell: int = 0  # accepted connections the shell closed later
    renew_ms: list[float] = field(default_factory=list)
    renewals_failed: int = 0
    new_connections: int = 0


def raise_own_fd_limit(want: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target


def client_context(env: Env) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(env.ca()))
    ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    return ctx


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(OSError, TimeoutError):
        await asyncio.wait_for(writer.wait_closed(), 2)


async def _until_closed(reader: asyncio.StreamReader) -> None:
    with contextlib.suppress(OSError):
        while await reader.read(65536):
            pass


async def _connect(
    port: int, ctx: ssl.SSLContext, counts: Counts
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """A TLS connection to the listener, counted accepted; or None, counted refused, after a pause of 1-2 s
    (random: load shaping, not security)."""
    try:
        opened = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, ssl=ctx), 30)
    except (OSError, TimeoutError):
        counts.refused += 1
        await asyncio.sleep(random.uniform(1.0, 2.0))  # noqa: S311
        return None
    counts.accepted += 1
    return opened


async def idle_client(port: int, ctx: ssl.SSLContext, counts: Counts, stop: asyncio.Event) -> None:
    """Open a TLS connection, send nothing, wait for the shell to close it; again until `stop`."""
    await asyncio.sleep(random.uniform(0, RAMP_S))  # noqa: S311
    while not stop.is_set():
        opened = await _connect(port, ctx, counts)
        if opened is None:
            continue
        reader, writer = opened
        try:
            await _until_closed(reader)
            counts.closed_by_shell += 1
        finally:
            await _close(writer)


async def slowloris_client(port: int, ctx: ssl.SSLContext, counts: Counts, stop: asyncio.Event) -> None:
    """Drip an endless request head one byte every DRIP_S; reconnect when closed, until `stop`."""
    await asyncio.sleep(random.uniform(0, RAMP_S))  # noqa: S311
    while not stop.is_set():
        opened = await _connect(port, ctx, counts)
        if opened is None:
            continue
        reader, writer = opened
        closed = asyncio.ensure_future(_until_closed(reader))
        try:
            writer.write(b"GET /openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            while not closed.done() and not stop.is_set():
                writer.write(b"s")
                await asyncio.wait({closed}, timeout=DRIP_S)
            if closed.done():
                counts.closed_by_shell += 1
        finally:
            closed.cancel()
            await _close(writer)


async def hold_lease(env: Env, who: Identity, origin: str) -> tuple[SimWorker, dict[str, Any]]:
    """Through the shell: open a session, pull the one offer, ACK starting and running."""
    worker = SimWorker(env, who, origin)
    await worker.open_session()
    base = f"/api/v3/workers/{who.worker_id}/sessions/{worker.session_id}"
    status, answer = await worker.post(f"{base}/offers:pull", OfferPullRequest(pull_id=str(uuid.uuid4())).to_json())
    assert status == 200 and answer["status"] == "offered", answer
    offer, token = answer["offer"], answer["leaseToken"]
    fence = {
        "worker_generation": 1, "project_id": offer["projectId"], "run_id": offer["runId"],
        "attempt_id": offer["attemptId"], "lease_generation": offer["leaseGeneration"], "lease_token": token,
    }  # fmt: skip
    version = 1
    for phase in ("starting", "running"):
        body = ActivationRequest(**fence).to_json()
        status, answer = await worker.post(f"{base}/offers/{offer['offerId']}/activation/{phase}", body)
        assert status == 200 and answer["status"] == "applied", answer
        version = int(answer["snapshot"]["leaseVersion"])
    return worker, {"base": base, "fence": fence, "offer_id": offer["offerId"], "version": version}


async def renew_loop(env: Env, worker: SimWorker, held: dict[str, Any], counts: Counts, stop: asyncio.Event) -> None:
    """Renew every RENEW_EVERY_S; every NEW_CONNECTION_EVERY-th renewal goes over a new TLS connection."""
    n = 0
    while not stop.is_set():
        n += 1
        if n % NEW_CONNECTION_EVERY == 0:
            fresh = SimWorker(env, worker.who, worker.origin)
            fresh.session_id, fresh.key = worker.session_id, worker.key
            await worker.close()
            worker = fresh
            counts.new_connections += 1
        body = LeaseControlRequest(
            **held["fence"], offer_id=held["offer_id"], expected_version=held["version"]
        ).to_json()
        started = time.perf_counter()
        try:
            status, answer = await worker.post(held["base"] + "/lease-control", body)
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:  # a failed renewal
            status, answer = 0, {"error": type(exc).__name__}
        if status == 200 and answer.get("status") == "renewed":
            held["version"] = int(answer["leaseVersion"])
            counts.renew_ms.append((time.perf_counter() - started) * 1000)
        else:
            counts.renewals_failed += 1
            say(f"(f) renewal failed: {status} {answer}")
        await asyncio.sleep(RENEW_EVERY_S)
    await worker.close()


async def calibrate(port: int, ctx: ssl.SSLContext, pid: int) -> tuple[float, float]:
    """(RSS before, KiB of RSS per idle TLS connection), from CALIBRATION_CONNECTIONS held together."""
    before = (status_kb(pid, "VmRSS") or 0) / 1024
    held = [await asyncio.open_connection("127.0.0.1", port, ssl=ctx) for _ in range(CALIBRATION_CONNECTIONS)]
    await asyncio.sleep(0.5)
    during = (status_kb(pid, "VmRSS") or 0) / 1024
    for _, writer in held:
        await _close(writer)
    return before, (during - before) * 1024 / CALIBRATION_CONNECTIONS


def budget_hits(admin_port: int) -> dict[str, int]:
    with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {f"{listener}.{budget}": int(float(n)) for budget, listener, n in _HIT.findall(text)}


async def flood(env: Env, shell: ShellProcess, seconds: float) -> dict[str, Any]:
    assert shell.pid is not None
    ctx = client_context(env)
    with psycopg.connect(env.dsn("flood"), autocommit=True) as conn:
        (who,) = enroll(env, conn, 1, "flood", "flood")
        task = make_task(conn, "flood", "flood-task", {"argv": ["sleep", "3600"], "pool": "flood"})
        queue_runs(conn, task, 1)
    worker, held = await hold_lease(env, who, shell.origin)
    rss_base, per_connection_kib = await calibrate(shell.user_port, ctx, shell.pid)
    user = BUDGETS["user_listener"]
    worker_budget = BUDGETS["worker_listener"]
    # The user listener at its cap, each connection with a full head budget, and the Worker's connection
    # (two while one is being replaced).
    bound = rss_base + (user.max_connections + 2) * (per_connection_kib + user.max_header_bytes / 1024) / 1024
    say(
        f"(f) shell RSS {rss_base:.0f} MiB, {per_connection_kib:.0f} KiB per idle TLS connection; bound {bound:.0f} MiB"
    )
    await asyncio.sleep(user.header_timeout + 1)  # the calibration's connections are gone
    counts, stop = Counts(), asyncio.Event()
    say(
        f"(f) flood 1: {IDLE_CLIENTS} idle TLS + {SLOWLORIS_CLIENTS} slowloris clients on the user listener, "
        f"{seconds:.0f} s"
    )
    renewer = asyncio.ensure_future(renew_loop(env, worker, held, counts, stop))
    reset_peak(shell.pid)
    marks = {"idle": len(counts.renew_ms)}  # where each flood's renewals start in counts.renew_ms
    over = asyncio.Event()  # the end of this phase (stop: of the renewals, after all three)
    clients = [asyncio.ensure_future(idle_client(shell.user_port, ctx, counts, over)) for _ in range(IDLE_CLIENTS)]
    clients += [
        asyncio.ensure_future(slowloris_client(shell.user_port, ctx, counts, over)) for _ in range(SLOWLORIS_CLIENTS)
    ]
    samples: list[float] = []
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        samples.append((status_kb(shell.pid, "VmRSS") or 0) / 1024)
        await asyncio.sleep(0.25)
    over.set()
    for client in clients:
        client.cancel()
    await asyncio.gather(*clients, return_exceptions=True)
    peak = (status_kb(shell.pid, "VmHWM") or 0) / 1024
    phases: dict[str, Flood] = {}
    for name, flood_ctx in (("certless", client_context(env)), ("certificate", env.client_context(worker.who))):
        say(f"(f) flood {len(phases) + 2}: {HANDSHAKE_CLIENTS} clients handshaking ({name}) on the worker listener")
        marks[name] = len(counts.renew_ms)
        phases[name] = await handshake_flood(
            shell.pid, shell.worker_port, flood_ctx, clients=HANDSHAKE_CLIENTS, seconds=HANDSHAKE_S
        )
    stop.set()
    await renewer
    bounds = [*marks.values(), len(counts.renew_ms)]
    by_flood = {name: counts.renew_ms[bounds[i] : bounds[i + 1]] for i, name in enumerate(marks)}
    say(f"(f) floods over; the shell's RSS {status_mib(shell.pid):.0f} MiB; waiting {AFTER_S:.0f} s")
    after: list[tuple[float, float]] = []
    ended = time.monotonic()
    while (waited := time.monotonic() - ended) < AFTER_S:
        after.append((waited, status_mib(shell.pid)))
        await asyncio.sleep(0.5)
    rss_after = status_mib(shell.pid)
    back = next((t for t, rss in after if rss <= RETURN * rss_base), None)
    hits = await asyncio.to_thread(budget_hits, shell.admin_port)
    return {
        "idle_connections": IDLE_CLIENTS,
        "slowloris_clients": SLOWLORIS_CLIENTS,
        "renewals_ok": len(counts.renew_ms),
        "renewals_failed": counts.renewals_failed,
        "renew_p99_ms": round(percentile(counts.renew_ms, 99), 2),
        "rss_peak_mib": round(max(peak, *(f.peak_mib for f in phases.values())), 1),
        "rss_bound_mib": round(bound, 1),
        "renew_p50_ms": round(percentile(counts.renew_ms, 50), 2),
        "renewals_on_new_connections": counts.new_connections,
        "rss_base_mib": round(rss_base, 1),
        "rss_flood_max_sampled_mib": round(max(samples, default=0.0), 1),
        "per_connection_kib": round(per_connection_kib, 1),
        "client_handshakes_completed": counts.accepted,
        "client_connections_refused": counts.refused,
        "client_connections_closed_by_shell": counts.closed_by_shell,
        "budget_hits": hits,
        "seconds": seconds,
        "budgets": {"user": vars(user), "worker": vars(worker_budget)},
        "rss_idle_mib": round(rss_base, 1),
        "rss_ceiling_mib": round(CEILING * rss_base, 1),
        "idle_flood_rss_peak_mib": round(peak, 1),
        "certless_handshake_rss_peak_mib": round(phases["certless"].peak_mib, 1),
        "certificate_handshake_rss_peak_mib": round(phases["certificate"].peak_mib, 1),
        "rss_after_60s_mib": round(rss_after, 1),
        "rss_back_within_20pct_s": None if back is None else round(back, 1),
        "handshake_clients": HANDSHAKE_CLIENTS,
        "handshake_seconds": HANDSHAKE_S,
        "renew_ms_by_flood": {
            name: {"ok": len(ms), "p50": round(percentile(ms, 50), 2), "p99": round(percentile(ms, 99), 2)}
            for name, ms in by_flood.items()
        },
        "handshakes": {
            name: {"completed": f.completed, "refused": f.refused, "rss_peak_mib": round(f.peak_mib, 1)}
            for name, f in phases.items()
        },
    }


def render(c: dict[str, Any]) -> str:
    user = c["budgets"]["user"]
    worker = c["budgets"]["worker"]
    hits = ", ".join(f"{k} {v:,}" for k, v in sorted(c["budget_hits"].items())) or "none"
    shakes = c["handshakes"]
    by = c["renew_ms_by_flood"]
    back = "not within 60 s" if c["rss_back_within_20pct_s"] is None else f"{c['rss_back_within_20pct_s']:.0f} s"
    rows = [
        ["Worker renewals ok · failed", f"{c['renewals_ok']:,} · {c['renewals_failed']}",
         f"lease control every {RENEW_EVERY_S} s through all three floods; {c['renewals_on_new_connections']} of "
         "them on a new TLS connection"],
        ["renewal p50 · p99", f"{c['renew_p50_ms']:.1f} ms · {c['renew_p99_ms']:.1f} ms",
         "through the floods; by flood (1 · 2 · 3): p50 " + " · ".join(f"{v['p50']:.0f}" for v in by.values())
         + " ms, p99 " + " · ".join(f"{v['p99']:.0f}" for v in by.values()) + " ms"],
        ["shell RSS idle", f"{c['rss_idle_mib']:.0f} MiB",
         f"after the Worker's session opened; ceiling for every flood: twice this, {c['rss_ceiling_mib']:.0f} MiB"],
        ["1. idle + slowloris: peak RSS (VmHWM)", f"{c['idle_flood_rss_peak_mib']:.0f} MiB",
         f"bound {c['rss_bound_mib']:.0f} MiB = {c['rss_base_mib']:.0f} MiB idle + "
         f"{user['max_connections']} x ({c['per_connection_kib']:.0f} KiB per idle TLS connection + "
         f"{user['max_header_bytes'] // 1024} KiB of head)"],
        ["1. client connections: handshakes completed · refused · closed later by the shell",
         f"{c['client_handshakes_completed']:,} · {c['client_connections_refused']:,} · "
         f"{c['client_connections_closed_by_shell']:,}", ""],
        ["2. certless handshakes: peak RSS (VmHWM)", f"{c['certless_handshake_rss_peak_mib']:.0f} MiB",
         f"{c['handshake_clients']} clients from one address for {c['handshake_seconds']:.0f} s: "
         f"{shakes['certless']['completed']:,} handshakes ended client-side (the shell refused each), "
         f"{shakes['certless']['refused']:,} failed client-side; the budget lets one source have "
         f"{worker['max_handshakes_per_source']} under way (the listener {worker['max_handshakes']}), the others "
         "wait their turn"],
        ["3. handshakes with a certificate: peak RSS (VmHWM)", f"{c['certificate_handshake_rss_peak_mib']:.0f} MiB",
         f"{shakes['certificate']['completed']:,} handshakes, {shakes['certificate']['refused']:,} failed"],
        ["shell RSS 60 s after the floods", f"{c['rss_after_60s_mib']:.0f} MiB",
         f"back within 20 % of idle after {back}"],
        ["budget hits counted by the shell", hits, "qinglong_shell_budget_hits_total"],
    ]  # fmt: skip
    return (
        "## (f) Flood: connection budgets under abuse\n\n"
        f"One shell process with its default budgets, and one Worker renewing its Lease on the worker listener "
        "(Worker protocol, ql3w-signed) through three floods in turn. 1: for "
        f"{c['seconds']:.0f} s, {c['idle_connections']:,} clients open TLS connections to the user listener and "
        f"send nothing, and {c['slowloris_clients']} slowloris clients drip a request head into it one byte every "
        f"{DRIP_S} s (each reconnects when closed, 1 to 2 s after a refusal). 2: {c['handshake_clients']} clients "
        f"from 127.0.0.2 handshake with the worker listener without a client certificate, each again at once, for "
        f"{c['handshake_seconds']:.0f} s. 3: the same with the Worker's certificate. All in this load generator's "
        "one process, on the same 2 cores.\n\n"
        f"{table(['measured', 'value', ''], rows)}\n"
    )


def summary(c: dict[str, Any]) -> list[str]:
    return [
        f"(f) flood: {c['idle_connections']} idle + {c['slowloris_clients']} slowloris clients, then "
        f"{c['handshake_clients']} handshaking clients without and with a certificate; renewals "
        f"{c['renewals_ok']} ok, {c['renewals_failed']} failed, p99 {c['renew_p99_ms']:.1f} ms; shell RSS idle "
        f"{c['rss_idle_mib']:.0f} MiB, peaks {c['idle_flood_rss_peak_mib']:.0f} · "
        f"{c['certless_handshake_rss_peak_mib']:.0f} · {c['certificate_handshake_rss_peak_mib']:.0f} MiB "
        f"(ceiling {c['rss_ceiling_mib']:.0f} MiB), {c['rss_after_60s_mib']:.0f} MiB 60 s later"
    ]


def run(env: Env, seconds: float) -> Result:
    """Part (f) of `make bench`: its own database and shell process."""
    raise_own_fd_limit(4 * (IDLE_CLIENTS + SLOWLORIS_CLIENTS))
    env.create_database("flood")
    shell = ShellProcess(env, "flood", name="shell-flood")
    shell.start()
    say(f"(f) shell serving (pid {shell.pid}) with its default budgets")
    try:
        counts = asyncio.run(flood(env, shell, seconds))
    finally:
        shell.stop()
    record_json("flood", counts)
    return Result(render(counts), summary(counts), {"flood": counts})
