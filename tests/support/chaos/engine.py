"""The chaos engine: sets up the project, the Workers (each behind its fault proxy) and the Runs, then runs
them while it kills, freezes and corrupts Workers and converges every 0.5 s, and counts what happened
(tests.support.chaos.analysis). Touches what tests.support.chaos says: its root folder, the database it is
given, loopback ports, the processes it starts and this process's child-subreaper flag while it runs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

from qinglong.cli import admin, pki
from qinglong.cli import operators as op
from qinglong.cli.api import ApiError, Unreachable, UserApi
from qinglong.wire.common import token_digest
from tests.support.chaos.analysis import TERMINAL, tally
from tests.support.chaos.config import TASK_SCRIPT, ChaosConfig, RunSpec, plan_runs
from tests.support.chaos.evidence import read_database, read_launches
from tests.support.chaos.processes import child_subreaper, processes_under, reap_orphans
from tests.support.chaos.proxy import FaultProxy
from tests.support.chaos.workers import Fault, WorkerSlot
from tests.support.env import Env, ShellProcess
from tests.support.progress import say


class Chaos:
    def __init__(self, env: Env, database: str, config: ChaosConfig, root: Path) -> None:
        self.env = env
        self.database = database
        self.cfg = config
        self.root = root
        seed = config.seed if config.seed is not None else int.from_bytes(os.urandom(4), "big")
        self.seed = seed
        self.rng = random.Random(seed)  # noqa: S311 - fault timing, not secrets
        self.faults: list[Fault] = []
        self.specs: list[RunSpec] = []
        self.slots: list[WorkerSlot] = []
        self.shell: ShellProcess | None = None
        self.converge_calls = 0
        self.converge_errors = 0
        self.terminal = 0
        self.journal_fail_closed: bool | None = None
        self.requests_after_fail_closed: int | None = None
        self.api_errors = 0
        self.leftover_processes = 0
        self._fault_tasks: list[asyncio.Task[None]] = []
        self._stop_faults = asyncio.Event()

    # -- setup --

    def dsn(self, user: str = "postgres") -> str:
        return self.env.dsn(self.database, user)

    def setup(self) -> None:
        cfg = self.cfg
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(
                "update ql.settings set lease_ttl_ms = %s, offer_ttl_ms = %s, worker_stop_grace_ms = %s",
                (cfg.lease_ttl_ms, cfg.offer_ttl_ms, round(cfg.stop_grace_s * 1000)),
            )
        dsn = self.dsn()
        with admin.transaction(dsn) as tx:
            self.project = str(tx.call(op.project_create_v1, p_name="chaos")["projectId"])
            self.token = os.urandom(24).hex()
            subject = tx.call(op.subject_create_v1, p_kind="user", p_name="chaos-operator",
                              p_token_digest=token_digest(self.token))["subjectId"]  # fmt: skip
            tx.call(op.role_binding_set_v1, p_project_id=self.project, p_subject_id=subject, p_role="operator",
                    p_active=True)  # fmt: skip
        certs = self.env.certs
        for i in range(cfg.workers):
            worker_id = str(uuid.uuid4())
            folder = self.root / f"worker-{i}"
            folder.mkdir(parents=True)
            issued = pki.issue_worker(certs, worker_id, name=f"chaos-{i}")
            with admin.transaction(dsn) as tx:
                tx.call(op.worker_enroll_v1, p_worker_id=worker_id, p_name=f"chaos-{i}", p_pool="default",
                        p_cert_fingerprint=issued.fingerprint)  # fmt: skip
            slot = WorkerSlot(i, worker_id, folder, folder / "worker.toml", FaultProxy(0, cfg, self.rng))
            slot.config.write_text(
                f'origin = "https://127.0.0.1:{{port}}"\nworker_id = "{worker_id}"\ngeneration = 1\n'
                f"capacity = {cfg.capacity}\n"
                f'certificate = "{issued.certificate}"\nkey = "{issued.key}"\ntrust_anchors = "{certs}/ca.crt"\n'
                f'journal = "{slot.journal}"\nwork_dir = "{slot.work_dir}"\ntick_seconds = {cfg.tick_s}\n'
                f"page_size = 16\nshutdown_seconds = 5.0\nstop_grace_seconds = {cfg.stop_grace_s}\n"
                "require_signed_plans = false\n"
                "keep_files_seconds = 86400\n"  # the audit reads every launch's files after the run (evidence.py)
                + ("allow_root_tasks = true\n" if os.geteuid() == 0 else "")  # benchmarks run as root here
            )
            self.slots.append(slot)
        self.specs = plan_runs(self.rng, cfg, self.root / "tasks")
        with admin.transaction(dsn) as tx:
            for spec in self.specs:
                plan: dict[str, Any] = {
                    "argv": [
                        "sh",
                        "-c",
                        TASK_SCRIPT,
                        "chaos-task",
                        str(spec.folder),
                        f"{spec.sleep_s:.2f}",
                        str(spec.code),
                    ],
                    "maxAttempts": spec.max_attempts,
                    "retryBackoffMs": 200,
                }
                if spec.timeout_ms is not None:
                    plan["timeoutMs"] = spec.timeout_ms
                created = tx.call(
                    op.task_create_v1,
                    p_project_id=self.project,
                    p_name=f"chaos-{spec.index}",
                    p_plan=plan,
                    p_plan_signature=None,
                )
                spec.task_id = str(created["taskId"])

    # -- the run --

    async def run(self) -> dict[str, Any]:
        cfg = self.cfg
        self.shell = ShellProcess(self.env, self.database, name="chaos-shell")
        await asyncio.to_thread(self.shell.start)
        self.api = UserApi(f"https://127.0.0.1:{self.shell.user_port}", self.token, self.env.ca())
        for slot in self.slots:
            slot.proxy.target_port = self.shell.worker_port
            await slot.proxy.start()
            slot.config.write_text(slot.config.read_text().replace("{port}", str(slot.proxy.port)))
            slot.start()
        say(f"chaos: shell pid {self.shell.pid}, {cfg.workers} Workers behind fault proxies, seed {self.seed}")
        started = time.monotonic()
        background = [
            asyncio.ensure_future(self._converge_loop()),
            asyncio.ensure_future(self._reaper()),
        ]
        faults = asyncio.ensure_future(self._fault_loop())
        cancels: list[asyncio.Task[None]] = []
        try:
            await self._submit_all(cancels)
            self._stop_faults.set()
            await faults
            await asyncio.gather(*cancels)
            drained_from = time.monotonic()
            say(f"chaos: {cfg.runs} Runs queued in {drained_from - started:.0f} s; draining (≤ {cfg.drain_s:.0f} s)")
            while time.monotonic() - drained_from < cfg.drain_s:
                if await asyncio.to_thread(self._count_terminal) >= cfg.runs:
                    break
                await asyncio.sleep(0.5)
            elapsed_s = time.monotonic() - started
        finally:
            self._stop_faults.set()
            if not faults.done():
                faults.cancel()
            for c in cancels:
                c.cancel()
            await self._shutdown()
            for task in background:
                task.cancel()
            await asyncio.gather(*background, faults, *cancels, return_exceptions=True)
        return await asyncio.to_thread(self.analyse, elapsed_s)

    async def _shutdown(self) -> None:
        for slot in self.slots:
            slot.signal(signal.SIGCONT)
            slot.signal(signal.SIGTERM)
        for slot in self.slots:
            if slot.popen is not None:
                try:
                    await asyncio.to_thread(slot.popen.wait, 10)
                except subprocess.TimeoutExpired:
                    slot.kill()
        for slot in self.slots:
            await slot.proxy.stop()
        if self.shell is not None:
            await asyncio.to_thread(self.shell.stop)
        # Tasks of this run that still live (none when every Run ended): ours to end, by pid.
        deadline = time.monotonic() + 10
        while (left := processes_under(self.root)) and time.monotonic() < deadline:  # noqa: ASYNC110 - /proc poll
            await asyncio.sleep(0.2)
        for pid in processes_under(self.root):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.leftover_processes = len(left)
        await asyncio.sleep(0.1)
        reap_orphans(self._tracked())

    def _tracked(self) -> set[int]:
        pids = {s.popen.pid for s in self.slots if s.popen is not None}
        if self.shell is not None and self.shell.pid is not None:
            pids.add(self.shell.pid)
        return pids

    async def _reaper(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            reap_orphans(self._tracked())

    def _count_terminal(self) -> int:
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            row = conn.execute(
                "select count(*) from ql.runs where status in ('succeeded', 'failed', 'cancelled', 'timed_out')"
            ).fetchone()
        assert row is not None
        self.terminal = int(row[0])
        return self.terminal

    async def _converge_loop(self) -> None:
        grace = self.cfg.reconcile_grace_ms
        conn = await psycopg.AsyncConnection.connect(self.dsn("ql_scheduler"), autocommit=True)
        try:
            while True:
                try:
                    await conn.execute("call ql_api.converge(64, 16, %s)", (grace,))
                    self.converge_calls += 1
                except psycopg.Error:
                    self.converge_errors += 1
                await asyncio.sleep(self.cfg.converge_every_s)
        finally:
            await conn.close()

    async def _submit_all(self, cancels: list[asyncio.Task[None]]) -> None:
        last_count = next_at = 0.0
        for spec in self.specs:
            while True:
                if time.monotonic() - last_count > 0.5:
                    await asyncio.to_thread(self._count_terminal)
                    last_count = time.monotonic()
                if spec.index - self.terminal < self.cfg.max_active:
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            next_at = time.monotonic() + self.cfg.submit_every_s
            spec.run_id = await self._enqueue(spec)
            if spec.cancel_after_s is not None:
                cancels.append(asyncio.ensure_future(self._cancel(spec)))
            if spec.index % 100 == 99:
                say(f"chaos: {spec.index + 1} Runs queued, {self.terminal} ended")

    async def _user(self, method: str, path: str, body: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
        for attempt in range(5):
            try:
                return await asyncio.to_thread(self.api.request, method, path, body)
            except Unreachable:
                self.api_errors += 1
                if attempt == 4:
                    raise
                await asyncio.sleep(0.2)
        raise AssertionError("unreachable")

    async def _enqueue(self, spec: RunSpec) -> str:
        body = {"schema": "qinglong/run-enqueue@v1", "mutationId": f"chaos-{spec.index}", "taskId": spec.task_id}
        _, answer = await self._user("POST", f"/api/v3/projects/{self.project}/runs", body)
        assert answer["status"] in ("enqueued", "already_enqueued"), answer
        return str(answer["runId"])

    async def _cancel(self, spec: RunSpec) -> None:
        assert spec.cancel_after_s is not None
        await asyncio.sleep(spec.cancel_after_s)
        body = {"schema": "qinglong/run-cancellation@v1", "mutationId": f"cancel-{spec.index}"}
        sent = time.time()
        try:
            http, answer = await self._user(
                "POST", f"/api/v3/projects/{self.project}/runs/{spec.run_id}/cancellation", body
            )
        except ApiError as exc:
            spec.cancel = {"sent": sent, "received": time.time(), "http": exc.status, "status": exc.code}
            return
        spec.cancel = {
            "sent": sent,
            "received": time.time(),
            "http": http,
            "status": answer.get("status"),
            "runStatus": answer.get("runStatus"),
        }

    # -- Worker faults --

    async def _fault_loop(self) -> None:
        """A fixed opening (so even a short run sees each kind), then faults at random moments."""
        opening = ["kill", "stop", "journal", "kill_long"]
        while not self._stop_faults.is_set():
            pause = self.rng.expovariate(1 / self.cfg.fault_every_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop_faults.wait(), pause)
            if self._stop_faults.is_set():
                break
            idle = [s for s in self.slots if not s.busy]
            if len(idle) < 2:  # at least one Worker stays up
                continue
            weights = (0.45, 0.2, 0.35)
            kind = opening.pop(0) if opening else self.rng.choices(("kill", "kill_long", "stop"), weights)[0]
            slot = self.rng.choice(idle)
            slot.busy = True
            self._fault_tasks.append(asyncio.ensure_future(self._fault(kind, slot)))
        await asyncio.gather(*self._fault_tasks)

    async def _back_after(self, slot: WorkerSlot, since: float, fault: Fault) -> None:
        """The fault ends when the Worker's first answer after `since` is relayed (it is back)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            answers = slot.proxy.stats.answered_at
            if answers and answers[-1] > since:
                fault.end = next(t for t in answers if t > since)
                return
            await asyncio.sleep(0.05)
        fault.end = time.time()

    async def _fault(self, kind: str, slot: WorkerSlot) -> None:
        cfg = self.cfg
        try:
            fault = Fault(kind, slot.index, time.time())
            self.faults.append(fault)
            if kind in ("kill", "kill_long"):
                await asyncio.to_thread(slot.kill)
                down = self.rng.uniform(0.2, 2.0) if kind == "kill" else cfg.long_down_s + self.rng.uniform(0, 2)
                await asyncio.sleep(down)
                restarted = time.time()
                slot.start()
                await self._back_after(slot, restarted, fault)
            elif kind == "stop":
                slot.signal(signal.SIGSTOP)
                await asyncio.sleep(self.rng.uniform(0.5, cfg.long_down_s + 1.5))
                resumed = time.time()
                slot.signal(signal.SIGCONT)
                await self._back_after(slot, resumed, fault)
            else:
                await self._journal_fault(slot, fault)
        finally:
            slot.busy = False

    async def _journal_fault(self, slot: WorkerSlot, fault: Fault) -> None:
        """Delete the journal under a running Worker: it must fail closed (log journal.replaced and
        call the control plane no more). Then kill it and restart it with a fresh journal."""
        offset = slot.log.stat().st_size
        slot.journal.unlink()
        deadline = time.monotonic() + 10 * self.cfg.tick_s + 5
        seen = False
        while time.monotonic() < deadline:
            if b"journal.replaced" in slot.log.read_bytes()[offset:]:
                seen = True
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(self.cfg.tick_s + 0.2)  # a tick in flight at the moment of detection ends
        before = slot.proxy.stats.requests
        await asyncio.sleep(3 * self.cfg.tick_s)
        self.journal_fail_closed = seen
        self.requests_after_fail_closed = slot.proxy.stats.requests - before
        await asyncio.to_thread(slot.kill)
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                Path(f"{slot.journal}{suffix}").unlink()  # noqa: ASYNC240 - three unlinks
        restarted = time.time()
        slot.start()
        await self._back_after(slot, restarted, fault)

    # -- the analysis --

    def analyse(self, elapsed_s: float) -> dict[str, Any]:
        db = read_database(self.dsn())
        launches = read_launches(slot.work_dir for slot in self.slots)
        faults_by_worker: dict[str, list[Fault]] = {}
        for f in self.faults:
            faults_by_worker.setdefault(self.slots[f.worker].worker_id, []).append(f)
        found = tally(self.specs, faults_by_worker, db, launches)
        counts, examples, lags = found.counts, found.examples, found.lags
        stuck = [s for s in self.specs if s.run_id not in db["runs"] or db["runs"][s.run_id]["status"] not in TERMINAL]
        proxies = [s.proxy.stats for s in self.slots]
        kinds = [f.kind for f in self.faults]
        statuses: dict[str, int] = {}
        for r in db["runs"].values():
            statuses[r["status"]] = statuses.get(r["status"], 0) + 1
        cancels = [s.cancel for s in self.specs if s.cancel is not None]
        result: dict[str, Any] = {
            "runs": len([s for s in self.specs if s.run_id]),
            "lost_answers_injected": sum(p.lost_answers for p in proxies),
            "worker_kills": kinds.count("kill") + kinds.count("kill_long") + kinds.count("journal"),
            "healthy_tasks_stopped": counts["healthy_tasks_stopped"],
            "reruns_after_exit0": counts["reruns_after_exit0"],
            "spawned_after_cancel": counts["spawned_after_cancel"],
            "overlapping_executions": counts["overlapping_executions"],
            "max_stop_lag_after_local_expiry_s": round(max(lags), 3) if lags else 0.0,
            "stuck": len(stuck),
            "duplicate_events": db["duplicate_events"],
            # what else was measured
            "wrong_outcomes": counts["wrong_outcomes"],
            "ended_not_once": counts["ended_not_once"],
            "unmatched_executions": counts["unmatched_executions"],
            "stops_after_local_expiry": len(lags),
            "executions": found.executions,
            "attempts": sum(len(a) for a in db["attempts"].values()),
            "lost_attempts": sum(1 for a in db["by_offer"].values() if a["status"] == "lost"),
            "statuses": dict(sorted(statuses.items())),
            "kinds": {k: sum(1 for s in self.specs if s.kind == k) for k in ("ok", "ok_long", "fail", "timeout")},
            "cancels_sent": len(cancels),
            "cancels_accepted": sum(1 for c in cancels if c.get("status") == "accepted"),
            "cancels_accepted_before_start": sum(
                1 for c in cancels if c.get("status") == "accepted" and c.get("runStatus") in ("queued", "retry_wait")
            ),
            "requests_through_proxies": sum(p.requests for p in proxies),
            "cut_answers_injected": sum(p.cut_answers for p in proxies),
            "stalls_injected": sum(p.stalls for p in proxies),
            "resets_injected": sum(p.resets for p in proxies),
            "proxy_connections": sum(p.connections for p in proxies),
            "worker_faults": {k: kinds.count(k) for k in ("kill", "kill_long", "stop", "journal")},
            "journal_fail_closed": self.journal_fail_closed,
            "requests_after_fail_closed": self.requests_after_fail_closed,
            "worker_starts": sum(s.starts for s in self.slots),
            "converge_calls": self.converge_calls,
            "converge_errors": self.converge_errors,
            "user_api_retries": self.api_errors,
            "leftover_processes": self.leftover_processes,
            "seconds": round(elapsed_s, 1),
            "seed": self.seed,
            "config": {
                "workers": self.cfg.workers,
                "capacity": self.cfg.capacity,
                "tick_s": self.cfg.tick_s,
                "stop_grace_s": self.cfg.stop_grace_s,
                "lease_ttl_ms": self.cfg.lease_ttl_ms,
                "offer_ttl_ms": self.cfg.offer_ttl_ms,
                "reconcile_grace_ms": self.cfg.reconcile_grace_ms,
                "p_lose_answer": self.cfg.p_lose_answer,
                "p_cut_answer": self.cfg.p_cut_answer,
                "p_stall": self.cfg.p_stall,
                "p_reset": self.cfg.p_reset,
            },
            "examples": {k: v for k, v in examples.items() if v},
            "stuck_runs": [f"{s.index} {s.run_id} {db['runs'].get(s.run_id, {}).get('status')}" for s in stuck[:5]],
        }
        return result


def run_chaos(env: Env, database: str, config: ChaosConfig, root: Path) -> dict[str, Any]:
    """Set up and run the engine on `database` (deployed, in env's cluster); the measured counts."""
    engine = Chaos(env, database, config, root)
    engine.setup()
    with child_subreaper():
        return asyncio.run(engine.run())
