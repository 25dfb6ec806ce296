"""A Patroni cluster failing over under load: the chaos engine (tests.support.chaos.engine) with its Worker
and proxy faults replaced by SIGKILLs of the leader's postmaster, each once the cluster is healthy again
and `gap_s` of load later. Three PostgreSQL nodes under Debian's Patroni and one etcd
(qinglong.devdb.patroni), the shell and three Workers on the multi-host DSN
(`target_session_attrs=read-write`), users retrying through each failover, converge every 0.5 s besides
pg_cron's minute job. Used with one failover by tests/integration/test_patroni.py and at full size by
bench/failover.py. Counts (bench/README.md, part g): `acknowledged_lost`, `duplicate_events`,
`tasks_stopped`, `stuck`, `max_unavailable_s`, and whether pg_cron's convergence ran on the last leader.

Touches: its root folder (the Patroni cluster's data, PKI files, configs, journals, work folders, task
records, logs), loopback ports, the processes it starts (etcd, Patroni and its postgres servers, the shell,
the Workers and, as their child subreaper, orphaned task runners).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import math
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, cast

import psycopg

from qinglong.cli.api import ApiError, Unreachable
from qinglong.db import sqitch
from qinglong.devdb import Cluster
from qinglong.devdb.patroni import PatroniCluster
from tests.support.chaos.config import ChaosConfig
from tests.support.chaos.engine import Chaos
from tests.support.chaos.evidence import parse_task_log, pick_launch, read_database, read_launches
from tests.support.chaos.processes import child_subreaper
from tests.support.env import Env, new_env
from tests.support.progress import say

DATABASE: Final = "qinglong"
UNENDED: Final = frozenset({"claimed", "starting", "running", "lost"})
RETRY_FOR_S: Final = 60.0  # how long a user keeps retrying one call through a failover


@dataclass
class FailoverConfig:
    failovers: int = 10
    gap_s: float = 8.0  # load between a healthy cluster and the next kill
    lease_ttl_ms: int = 30_000  # longer than a failover's unavailability: Workers keep their tasks
    drain_s: float = 60.0
    cron_wait_s: float = 75.0  # pg_cron 1.4 has minute granularity
    probe_every_s: float = 0.1
    seed: int | None = None

    def chaos(self) -> ChaosConfig:
        # Runs enough for the whole series; the submitter stops once the last failover is done.
        runs = math.ceil(2 * self.failovers * (self.gap_s + 15) / 0.45) + 20
        return ChaosConfig(
            runs=runs,
            lease_ttl_ms=self.lease_ttl_ms,
            offer_ttl_ms=15_000,
            max_active=14,
            p_lose_answer=0.0,
            p_cut_answer=0.0,
            p_stall=0.0,
            p_reset=0.0,
            drain_s=self.drain_s,
            seed=self.seed,
        )


class PatroniEnv(Env):
    """The bench environment over a Patroni cluster: every address is the multi-host DSN."""

    patroni: PatroniCluster

    def dsn(self, db: str, user: str = "postgres") -> str:
        return self.patroni.dsn(db, user)


class Failover(Chaos):
    def __init__(self, env: PatroniEnv, config: FailoverConfig, root: Path) -> None:
        super().__init__(env, DATABASE, config.chaos(), root)
        self.fcfg = config
        self.patroni = env.patroni
        self.failovers: list[dict[str, Any]] = []  # {killed, new_leader, at, promoted_at, healthy_at}
        self.answered: list[float] = []  # the probe's 2xx answers, wall time
        self.done = asyncio.Event()

    # -- load --

    async def _submit_all(self, cancels: list[asyncio.Task[None]]) -> None:
        probe = asyncio.ensure_future(self._probe())
        try:
            for spec in self.specs:
                if self.done.is_set():
                    break
                while True:  # at most max_active Runs queued or running
                    if spec.index - await asyncio.to_thread(self._count_terminal) < self.cfg.max_active:
                        break
                    await asyncio.sleep(0.2)
                spec.run_id = await self._enqueue(spec)
                if spec.cancel_after_s is not None:
                    cancels.append(asyncio.ensure_future(self._cancel(spec)))
                await asyncio.sleep(self.cfg.submit_every_s)
            await self.done.wait()
        finally:
            probe.cancel()
            (ended,) = await asyncio.gather(probe, return_exceptions=True)
            if isinstance(ended, Exception):  # the probe gave up: its windows would be wrong
                raise ended
        self.specs = [s for s in self.specs if s.run_id]
        self.cfg.runs = len(self.specs)  # what the drain waits for

    def _count_terminal(self) -> int:
        try:
            return super()._count_terminal()
        except psycopg.OperationalError:  # the leader is changing: the last count stands
            return self.terminal

    async def _user(self, method: str, path: str, body: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
        """A user retrying through a failover: a 5xx or no connection is retried every 0.1 s for up to a minute
        (the same mutationId, so a retry is a replay)."""
        deadline = time.monotonic() + RETRY_FOR_S
        while True:
            try:
                return await asyncio.to_thread(self.api.request, method, path, body)
            except Unreachable:
                pass
            except ApiError as exc:
                if exc.status < 500:
                    raise
            self.api_errors += 1
            if time.monotonic() > deadline:
                raise Unreachable(f"{method} {path}: no answer for {RETRY_FOR_S:.0f} s")
            await asyncio.sleep(0.1)

    async def _probe(self) -> None:
        """A user reading the project every `probe_every_s`: the wall time of every 2xx answer."""
        while True:
            await self._user("GET", f"/api/v3/projects/{self.project}", None)
            self.answered.append(time.time())
            await asyncio.sleep(self.fcfg.probe_every_s)

    async def _converge_loop(self) -> None:
        grace = self.cfg.reconcile_grace_ms
        conn: psycopg.AsyncConnection[Any] | None = None
        try:
            while True:
                try:
                    if conn is None:
                        conn = await psycopg.AsyncConnection.connect(self.dsn("ql_scheduler"), autocommit=True)
                    await conn.execute("call ql_api.converge(64, 16, %s)", (grace,))
                    self.converge_calls += 1
                except psycopg.Error:
                    self.converge_errors += 1
                    if conn is not None:
                        await conn.close()
                        conn = None
                await asyncio.sleep(self.cfg.converge_every_s)
        finally:
            if conn is not None:
                await conn.close()

    # -- the failovers (in place of the Worker faults) --

    async def _fault_loop(self) -> None:
        try:
            for _ in range(self.fcfg.failovers):
                await asyncio.to_thread(self.patroni.wait_healthy)
                await asyncio.sleep(self.fcfg.gap_s)
                at = time.time()
                killed = await asyncio.to_thread(self.patroni.kill_leader_postmaster)
                while (leader := await asyncio.to_thread(self.patroni.leader)) is None or leader.name == killed:
                    if time.time() - at > 60:
                        raise RuntimeError(f"no new leader 60 s after killing {killed}: {self.patroni.members()}")
                    await asyncio.sleep(0.1)
                promoted = time.time()
                await asyncio.to_thread(self.patroni.wait_healthy)
                healthy = time.time()
                self.failovers.append(
                    {"killed": killed, "new_leader": leader.name, "at": at, "promoted_at": promoted,
                     "healthy_at": healthy}
                )  # fmt: skip
                say(f"failover {len(self.failovers)}: {killed} → {leader.name} in {promoted - at:.1f} s")
        finally:
            self.done.set()

    # -- the analysis --

    def analyse(self, elapsed_s: float) -> dict[str, Any]:
        counts = super().analyse(elapsed_s)
        db = read_database(self.dsn())
        launches = read_launches(slot.work_dir for slot in self.slots)
        lost: list[str] = []
        for spec in self.specs:
            run = db["runs"].get(spec.run_id)
            if run is None:  # the enqueue was answered 2xx
                lost.append(f"run {spec.index}: enqueue acknowledged, no Run {spec.run_id}")
                continue
            c = spec.cancel
            if c is not None and c.get("status") == "accepted" and run["cancel_requested_at_ms"] is None:
                lost.append(f"run {spec.index}: cancel accepted, no intent")
            for ex in parse_task_log(spec.folder / "log"):
                if ex.kind != "start" or ex.code is None:
                    continue  # only executions the task saw to their end are reported by their Worker
                launch = pick_launch(launches.get(ex.ppid, []), ex.start)
                attempt = None if launch is None else db["by_offer"].get(launch.offer_id)
                if attempt is None or attempt["status"] in UNENDED:
                    state = "no Attempt" if attempt is None else attempt["status"]
                    lost.append(f"run {spec.index}: exit {ex.code} at {ex.end}, Attempt {state}")
                elif attempt["exit_code"] is not None and attempt["exit_code"] != ex.code:
                    lost.append(f"run {spec.index}: exit {ex.code}, Attempt says {attempt['exit_code']}")
        windows = [self._window(i) for i in range(len(self.failovers))]
        counts.update(
            failovers=len(self.failovers),
            acknowledged_lost=len(lost),
            tasks_stopped=counts["healthy_tasks_stopped"],
            max_unavailable_s=round(max((w for w in windows if w is not None), default=0.0), 2),
            unavailable_s=[None if w is None else round(w, 2) for w in windows],
            promotion_s=[round(f["promoted_at"] - f["at"], 2) for f in self.failovers],
            healthy_again_s=[round(f["healthy_at"] - f["at"], 2) for f in self.failovers],
            probe_answers=len(self.answered),
            user_requests_retried=self.api_errors,
        )
        counts["examples"]["acknowledged_lost"] = lost[:5]
        return counts

    def _window(self, i: int) -> float | None:
        """The longest wait for a 2xx answer of the probe (minus its pause) that ended between the kill and 1 s
        after the cluster was healthy again: 5xx answers, refused connections and stalled answers alike."""
        f = self.failovers[i]
        gaps = [b - a for a, b in itertools.pairwise(self.answered) if f["at"] <= b <= f["healthy_at"] + 1.0]
        return max(gaps) - self.fcfg.probe_every_s if gaps else None

    def cron_after_failovers(self) -> dict[str, Any]:
        """pg_cron's job runs per leader epoch (start time after its promotion, before the next kill), waiting
        up to `cron_wait_s` for one on the last leader."""
        last = self.failovers[-1]["promoted_at"] if self.failovers else time.time()
        deadline = time.monotonic() + self.fcfg.cron_wait_s
        rows: list[tuple[float, str]] = []
        while time.monotonic() < deadline:
            try:
                with psycopg.connect(self.dsn(), autocommit=True) as conn:
                    rows = [
                        (float(r[0]), str(r[1]))
                        for r in conn.execute(
                            "select extract(epoch from d.start_time), d.status from cron.job_run_details d"
                            " join cron.job j using (jobid) where j.jobname = 'qinglong-converge'"
                        ).fetchall()
                    ]
            except psycopg.OperationalError:
                pass
            if any(t > last and s == "succeeded" for t, s in rows):
                break
            time.sleep(2)
        ends = [f["at"] for f in self.failovers[1:]] + [math.inf]
        epochs = [
            sum(1 for t, s in rows if f["promoted_at"] < t < end and s == "succeeded")
            for f, end in zip(self.failovers, ends, strict=True)
        ]
        return {
            "cron_runs_on_standbys": self._cron_runs_off_leader(),
            "cron_resumed_on_new_leader": bool(epochs) and epochs[-1] > 0,
            "cron_runs_per_leader": epochs,
            "cron_failed_runs": sum(1 for _, s in rows if s != "succeeded"),
        }

    def _cron_runs_off_leader(self) -> int:
        """Job starts that a node's log shows while that node was not the leader (pg_cron on a standby)."""
        if not self.failovers:
            return 0
        f = self.failovers
        epochs = [(f[0]["killed"], -math.inf, f[0]["at"])]
        epochs += [(x["new_leader"], x["promoted_at"], y["at"]) for x, y in itertools.pairwise(f)]
        epochs.append((f[-1]["new_leader"], f[-1]["promoted_at"], math.inf))
        off = 0
        for name in self.patroni.names:
            for line in self.patroni.log_file(name).read_text(errors="replace").splitlines():
                if re.search(r" LOG:  cron job \d+ starting", line):
                    at = dt.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=dt.UTC).timestamp()
                    off += not any(n == name and a - 1 <= at <= b + 1 for n, a, b in epochs)
        return off


def prepare(root: Path) -> PatroniEnv:
    """The Patroni cluster, the database with the schema deployed by sqitch on the leader, the bench PKI."""
    patroni = PatroniCluster(root / "patroni", DATABASE)
    say(f"Patroni: etcd and 3 nodes under {patroni.root}")
    patroni.start()
    leader = patroni.wait_healthy()
    with psycopg.connect(patroni.dsn("postgres"), autocommit=True) as conn:
        conn.execute(f"create database {DATABASE}")
    done = subprocess.run(
        sqitch("deploy", "--quiet", patroni.sqitch_target(leader.name)), capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        patroni.stop()
        raise RuntimeError(f"sqitch deploy failed:\n{done.stdout}\n{done.stderr}")
    base = new_env(root, cast(Cluster, None))  # every address comes from PatroniEnv.dsn
    env = PatroniEnv(base.root, base.cluster, base.certs, base.secret, base.secret_file, {})
    env.patroni = patroni
    return env


def run_failover(root: Path, config: FailoverConfig) -> dict[str, Any]:
    """Set up everything under `root` (a 0755 folder), run the engine, stop everything; the counts."""
    env = prepare(root)
    try:
        engine = Failover(env, config, root / "load")
        engine.setup()
        with child_subreaper():
            counts = asyncio.run(engine.run())
        counts.update(engine.cron_after_failovers())
        counts["config"].update(failovers=config.failovers, gap_s=config.gap_s, patroni="ttl 10, loop_wait 1,"
                                " retry_timeout 5, primary_start_timeout 0, synchronous_mode")  # fmt: skip
        return counts
    finally:
        env.patroni.stop()


FAILOVER_KEYS: Final = ("failovers", "acknowledged_lost", "duplicate_events", "tasks_stopped", "stuck",
                        "max_unavailable_s")  # fmt: skip
FAILOVER_ZEROS: Final = ("acknowledged_lost", "duplicate_events", "tasks_stopped", "stuck")
