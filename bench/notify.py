"""(m) Notifications through the outbox, on the bench cluster (fsync on): `--notify-events` (300) Runs of a Project
with a webhook rule are ended failed through the Worker's real calls over about 30 s, each completion's transaction
writing its outbox row; `qinglong notify serve` (a process of its own, as ql_notify, with the default backoff: 2 s
doubling to a 5 min cap) delivers them to an aiohttp receiver on loopback that verifies every HMAC-SHA256 signature
and counts deliveries by key. The receiver is down (its port closed) for `--notify-down-seconds` (10) in the middle.
Lag: the receiver's clock at a notification's first arrival minus its outbox row's created_at_ms.

Its keys in bench/results.json, merged into `notify` (part (l) writes the schedule figures there): events, delivered,
lost, duplicates_by_key, bad_signatures, receiver_down_s, max_delivery_lag_s, delivery_lag_p50_s; `lost == 0` and
`delivered == events` are the bar. Touches: database `notify` of the bench cluster (created), a loopback port, a
temporary folder (the dispatcher's files), the dispatcher process (stopped), bench/results.json.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import psycopg

from bench.report import RESULTS_JSON, Result, fmt, percentile, record_json, table
from tests.support.env import Env
from tests.support.notify import DispatcherProcess, Receiver, fail_runs, outbox_ids, prepare, states
from tests.support.progress import say

DATABASE: Final = "notify"
PRODUCE_S: Final = 30.0  # events are spread over this long
DOWN_AT_S: Final = 8.0  # the receiver goes down this long after the first events
DRAIN_S: Final = 600.0  # at most this long for the last deliveries after the receiver is back (the 5 min cap)


async def _measure(env: Env, events: int, down_s: float, folder: Path) -> dict[str, Any]:
    receiver = Receiver(key=b"")
    await receiver.start()
    dispatcher: DispatcherProcess | None = None
    try:
        with psycopg.connect(env.dsn(DATABASE), autocommit=True) as conn:
            setup = prepare(conn, folder, receiver.url)
        receiver.key = setup.key
        config = DispatcherProcess.write_config(folder, env.dsn(DATABASE, "ql_notify"), setup.kek_file)
        dispatcher = DispatcherProcess(config, folder / "notify.log")
        dispatcher.start()
        chunks = 30
        per_chunk = max(1, events // chunks)
        started = time.monotonic()
        down_for = 0.0
        produced = 0
        went_down: float | None = None
        with psycopg.connect(env.dsn(DATABASE), autocommit=True) as conn:
            chunk = 0
            while produced < events:
                chunk += 1
                count = min(per_chunk, events - produced)
                await asyncio.to_thread(fail_runs, conn, env.dsn(DATABASE, "ql_runtime"), setup, count)
                produced += count
                elapsed = time.monotonic() - started
                if went_down is None and elapsed >= DOWN_AT_S:
                    await receiver.down()
                    went_down = time.monotonic()
                    say(f"(m) receiver down after {produced} events")
                if went_down is not None and not down_for and time.monotonic() - went_down >= down_s:
                    await receiver.up()
                    down_for = time.monotonic() - went_down
                    say(f"(m) receiver back after {down_for:.1f} s")
                await asyncio.sleep(max(0.0, started + chunk * PRODUCE_S / chunks - time.monotonic()))
            if went_down is not None and not down_for:
                await asyncio.sleep(max(0.0, down_s - (time.monotonic() - went_down)))
                await receiver.up()
                down_for = time.monotonic() - went_down
            ids = outbox_ids(conn, setup.project)
            deadline = time.monotonic() + DRAIN_S
            for _ in range(int(DRAIN_S * 2)):
                if time.monotonic() >= deadline or not states(conn, setup.project)["pending"]:
                    break
                await asyncio.sleep(0.5)
            rows = conn.execute(
                "select id, created_at_ms from ql.notify_outbox where project_id = %s", (setup.project,)
            )
            created = {str(r[0]): r[1] / 1000 for r in rows}
            final = states(conn, setup.project)
        lags = [receiver.first_at[i] - created[i] for i in ids if i in receiver.first_at]
        delivered = len(ids & set(receiver.seen))
        return {
            "events": len(ids),
            "delivered": delivered,
            "lost": len(ids) - delivered,
            "duplicates_by_key": receiver.duplicates,
            "bad_signatures": receiver.bad_signatures,
            "receiver_down_s": round(down_for, 1),
            "max_delivery_lag_s": round(max(lags), 2) if lags else None,
            "delivery_lag_p50_s": round(percentile(lags, 50), 3) if lags else None,
            "dead": final["dead"],
        }
    finally:
        if dispatcher is not None:
            dispatcher.stop()
        await receiver.stop()


def run(env: Env, events: int, down_s: float) -> Result:
    """Part (m) of `make bench`."""
    say(f"(m) notifications: {events} failed Runs over {PRODUCE_S:.0f} s, the receiver down {down_s:.0f} s")
    env.create_database(DATABASE)
    with tempfile.TemporaryDirectory(prefix="qinglong-notify-") as folder:
        figures = asyncio.run(_measure(env, events, down_s, Path(folder)))
    notify: dict[str, Any] = {}
    with contextlib.suppress(FileNotFoundError, ValueError, AttributeError):
        notify = dict(json.loads(RESULTS_JSON.read_text()).get("notify") or {})
    notify.update({k: v for k, v in figures.items() if k != "dead"})
    record_json("notify", notify)
    markdown = (
        "## (m) Notifications\n\n"
        f"{figures['events']} Runs of a Project with a webhook rule ended failed through the Worker's real calls over "
        f"about {PRODUCE_S:.0f} s, each completion writing its outbox row in its own transaction; `qinglong notify "
        "serve` (its own process, as ql_notify, default backoff: 2 s doubling to a 5 min cap) delivered them to an "
        "aiohttp receiver on loopback that verified every signature and counted deliveries by key. The receiver's "
        f"port was closed for {figures['receiver_down_s']} s in the middle. Lag: first arrival at the receiver minus "
        "the outbox row's creation.\n\n"
        + table(
            ["figure", "value", "what"],
            [
                ["events", fmt(figures["events"]), "outbox rows written by the failing completions"],
                ["delivered", fmt(figures["delivered"]), "distinct delivery ids the receiver accepted"],
                ["lost", str(figures["lost"]), "bar: 0"],
                ["duplicates by key", str(figures["duplicates_by_key"]), "at least once: a receiver dedupes"],
                ["bad signatures", str(figures["bad_signatures"]), "bar: 0"],
                ["receiver down", f"{figures['receiver_down_s']} s", "connections refused"],
                ["delivery lag p50", f"{figures['delivery_lag_p50_s']} s", ""],
                ["delivery lag max", f"{figures['max_delivery_lag_s']} s", "the outage plus the backoff step"],
                ["dead", str(figures["dead"]), "attempts spent (30 by default): bar 0"],
            ],
        )
        + "\n"
    )  # fmt: skip
    summary = [
        f"(m) notify: {figures['events']} events, {figures['delivered']} delivered, {figures['lost']} lost, "
        f"{figures['duplicates_by_key']} duplicates, receiver down {figures['receiver_down_s']} s, max lag "
        f"{figures['max_delivery_lag_s']} s"
    ]
    return Result(markdown, summary, figures)
