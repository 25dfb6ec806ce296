"""The soak engine: one real `qinglong-worker run` process against the real shell (its own process) through
many short Runs — most exit 0, some print a MiB, some fail, some time out — with the Worker SIGKILLed and
restarted a few times and one disk-full episode (a filler file leaves less free space on the tmpfs that holds
work_dir than the Worker's `min_free_mib`, then goes). Meanwhile it samples the Worker's RSS (VmRSS), its open
file descriptors (/proc/<pid>/fd), the journal's records and bytes and the bytes under work_dir; afterwards it
checks every Run against the database and against the tasks' own record of their executions.

Each execution of a task appends one line, `<run id> <pid>`, to a file outside work_dir (the Run's directory
is `work_dir/tasks/<run id>`, so the task reads its Run from `$PWD`). Against that record and the database:
*stuck* = a Run not ended when the drain time is spent; *lost* = a Run with an Attempt the database recorded
`lost`, or one that ended with no execution, except a failing task's Run whose only Attempt a restart ended as
a start failure (`launch.never_started`: the restart found the launch journaled and no wrapper, so nothing
ran; counted as `ended_unstarted_by_a_restart`); *duplicated* = a Run whose task executed more than once —
whatever the reason, a retry included; *wrong* = a Run whose end differs from its kind's (succeeded,
succeeded, failed with exit 3, timed_out). A Run may have a second Attempt only after such a start failure
(`retried_after_a_restart`; plans other than the failing one have `maxAttempts = 2` for it); any other
Attempt before the last counts it as lost. Restarts last well under the Lease TTL, so no Lease is lost.

bench/soak.py runs it at full size (part (n), `soak` in bench/results.json); tests/integration/worker/
test_soak.py runs it short. Touches: its root folder (the Worker's config, journal, work_dir, the markers
file), a tmpfs it mounts on `root/tmpfs` and unmounts (as root, when `disk_full` is set), the database it is
given (settings, a project, a Worker, Tasks and Runs), loopback ports, the processes it starts, and this
process's child-subreaper flag while it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import statistics
import subprocess
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import psycopg

from qinglong.cli import admin, pki
from qinglong.cli import operators as op
from qinglong.worker.disk import usage
from tests.integration.db.factories import make_runs
from tests.support.chaos.processes import child_subreaper, processes_under, reap_orphans
from tests.support.env import Env, ShellProcess, start_worker, stop_process
from tests.support.progress import say

MIB: Final = 1 << 20
TERMINAL: Final = ("succeeded", "failed", "cancelled", "timed_out")
NEVER_STARTED: Final = "launch.never_started"  # a restart found the launch journaled and no wrapper (processor.py)
MARK: Final = 'echo "${PWD##*/} $$" >>"$1"'  # one line per execution: the Run (its directory's name), the pid
KINDS: Final[dict[str, tuple[str, int | None, tuple[str, int | None]]]] = {
    # kind: (script after the mark, timeoutMs, the expected (status, exit code))
    "ok": ("exit 0", None, ("succeeded", 0)),
    "mib": ("head -c 1048576 /dev/zero | tr '\\0' x; exit 0", None, ("succeeded", 0)),
    "fail": ("echo failing >&2; exit 3", None, ("failed", 3)),
    "timeout": ("exec sleep 60", 1000, ("timed_out", None)),
}


@dataclass
class SoakConfig:
    runs: int = 20_000
    capacity: int = 16
    tick_s: float = 0.05
    lease_ttl_ms: int = 10_000  # a restart (well under it) never loses a Lease: nothing is retried
    backlog: int = 128  # Runs queued and not ended at most (the feeder waits beyond it)
    mib_every: int = 100  # every n-th Run prints a MiB
    fail_every: int = 10
    timeout_every: int = 400
    restarts: int = 3  # SIGKILL + restart, in the first eighth of the Runs
    disk_full: bool = True  # work_dir on its own tmpfs (needs root), one episode below min_free_mib
    tmpfs_mib: int = 96
    min_free_mib: int = 32
    disk_full_hold_s: float = 3.0
    sample_every_s: float = 1.0
    warmup_share: float = 0.1  # of the Runs after the last restart: RSS growth counts from there
    idle_s: float = 8.0  # a Worker with nothing to do this long is idle (its RSS is read then)
    drain_s: float = 120.0
    max_seconds: float | None = None  # stop queueing after this long (then drain): `runs` says how many were queued

    def kind(self, i: int) -> str:
        if i % self.timeout_every == self.timeout_every // 2:
            return "timeout"
        if i % self.mib_every == 3:
            return "mib"
        if i % self.fail_every == 5:
            return "fail"
        return "ok"


@dataclass
class Sample:
    at: float
    ended: int
    rss_kib: int
    fds: int
    journal_records: int
    journal_bytes: int
    work_dir_bytes: int
    incarnation: int


@dataclass
class Soak:
    env: Env
    database: str
    cfg: SoakConfig
    root: Path
    samples: list[Sample] = field(default_factory=list)
    run_kind: dict[str, str] = field(default_factory=dict)
    incarnation: int = 0
    disk_full_episodes: int = 0
    restarts_done: int = 0
    idle_rss_kib: dict[str, int] = field(default_factory=dict)
    ended: int = 0
    target: int = 0  # Runs to end (cfg.runs, or fewer when the time budget ends the queueing)
    popen: subprocess.Popen[bytes] | None = None
    shell: ShellProcess | None = None
    mounted: bool = False

    # -- places --

    @property
    def state(self) -> Path:
        """The journal's folder: on the tmpfs too when there is one (its commits then cost no disk flush: the
        soak measures the Worker's footprint, and one tick's pace is bounded by its serial calls and writes)."""
        return (self.root / "tmpfs" if self.cfg.disk_full else self.root) / "state"

    @property
    def journal(self) -> Path:
        return self.state / "inbox.sqlite"

    @property
    def work_dir(self) -> Path:
        return (self.root / "tmpfs" if self.cfg.disk_full else self.state) / "runs"

    @property
    def markers(self) -> Path:
        return self.root / "executions.txt"

    @property
    def log(self) -> Path:
        return self.root / "worker.log"

    def dsn(self, user: str = "postgres") -> str:
        return self.env.dsn(self.database, user)

    # -- setup --

    def setup(self) -> None:
        cfg = self.cfg
        self.root.mkdir(parents=True, exist_ok=True)
        if cfg.disk_full:
            (self.root / "tmpfs").mkdir()
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={cfg.tmpfs_mib}m,mode=0755", "soak",
                            str(self.root / "tmpfs")], check=True)  # fmt: skip
            self.mounted = True
        self.state.mkdir()
        self.markers.touch(mode=0o666)
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute("update ql.settings set lease_ttl_ms = %s, offer_ttl_ms = %s",
                         (cfg.lease_ttl_ms, cfg.lease_ttl_ms))  # fmt: skip
        worker_id = str(uuid.uuid4())
        issued = pki.issue_worker(self.env.certs, worker_id, name="soak")
        self.revisions: dict[str, str] = {}
        with admin.transaction(self.dsn()) as tx:
            project = str(tx.call(op.project_create_v1, p_name="soak")["projectId"])
            tx.call(op.worker_enroll_v1, p_worker_id=worker_id, p_name="soak", p_pool="default",
                    p_cert_fingerprint=issued.fingerprint)  # fmt: skip
            for kind, (script, timeout_ms, _) in KINDS.items():
                # A restart that lands between the journaled launch and the spawn is a start failure
                # (launch.never_started, no execution): one more Attempt lets those Runs still end as their kind.
                # A failing task gets none (its exit 3 is final), so such a restart ends it `failed` unexecuted.
                plan: dict[str, Any] = {"argv": ["sh", "-c", f"{MARK}; {script}", "soak", str(self.markers)],
                                        "maxAttempts": 1 if kind == "fail" else 2}  # fmt: skip
                if timeout_ms is not None:
                    plan["timeoutMs"] = timeout_ms
                created = tx.call(op.task_create_v1, p_project_id=project, p_name=f"soak-{kind}", p_plan=plan,
                                  p_plan_signature=None)  # fmt: skip
                self.revisions[kind] = str(created["revisionId"])
        self.config = self.root / "worker.toml"
        self.config_text = (
            f'origin = "https://127.0.0.1:{{port}}"\nworker_id = "{worker_id}"\ngeneration = 1\n'
            f'capacity = {cfg.capacity}\ncertificate = "{issued.certificate}"\nkey = "{issued.key}"\n'
            f'trust_anchors = "{self.env.ca()}"\njournal = "{self.journal}"\nwork_dir = "{self.work_dir}"\n'
            f"tick_seconds = {cfg.tick_s}\npage_size = 16\nshutdown_seconds = 10.0\nstop_grace_seconds = 1.0\n"
            'require_signed_plans = false\nsecret_store = "off"\n'
            "keep_files_seconds = 0\nkeep_failed_files_seconds = 0\njournal_keep_seconds = 0\n"
            f"min_free_mib = {cfg.min_free_mib if cfg.disk_full else 0}\n"
            + ("allow_root_tasks = true\n" if os.geteuid() == 0 else "")
        )

    # -- the run --

    async def run(self) -> dict[str, Any]:
        self.target = self.cfg.runs
        self.shell = ShellProcess(self.env, self.database, name="soak-shell")
        await asyncio.to_thread(self.shell.start)
        self.config.write_text(self.config_text.replace("{port}", str(self.shell.worker_port)))
        self._start_worker()
        say(f"soak: shell pid {self.shell.pid}, Worker pid {self.pid}, capacity {self.cfg.capacity}, "
            f"{self.cfg.runs} Runs")  # fmt: skip
        started = time.monotonic()
        self.idle_rss_kib["fresh"] = await self._idle_rss()
        background = [asyncio.ensure_future(self._sampler()), asyncio.ensure_future(self._converger()),
                      asyncio.ensure_future(self._reaper())]  # fmt: skip
        faults = asyncio.ensure_future(self._faults())
        background.append(faults)
        try:
            await self._feed()
            drained_from = time.monotonic()
            while time.monotonic() - drained_from < self.cfg.drain_s:
                if self.ended >= self.target and (faults.done() or self.target < self.cfg.runs):
                    break
                await asyncio.sleep(0.5)
                await asyncio.to_thread(self._count_ended)
            if faults.done():
                faults.result()  # a fault that failed is the soak's failure
            elapsed_s = time.monotonic() - started
            await self._wait_clean()
            self.idle_rss_kib["after"] = await self._idle_rss()
            await self._sample()
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await self._shutdown()
        return await asyncio.to_thread(self.analyse, elapsed_s)

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def _start_worker(self) -> None:
        self.incarnation += 1
        with self.log.open("ab") as log:
            log.write(f"--- start {self.incarnation} at {time.time():.3f}\n".encode())
        self.popen = start_worker(self.config, self.log)

    def _count_ended(self) -> int:
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            row = conn.execute("select count(*) from ql.runs where status = any(%s)", (list(TERMINAL),)).fetchone()
        assert row is not None
        self.ended = int(row[0])
        return self.ended

    def _queue(self, first: int, count: int) -> None:
        """Runs first..first+count-1, each of its index's kind (grouped by kind in one transaction)."""
        kinds: dict[str, int] = Counter(self.cfg.kind(i) for i in range(first, first + count))
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            for kind, n in kinds.items():
                for run in make_runs(conn, uuid.UUID(self.revisions[kind]), n):
                    self.run_kind[str(run)] = kind

    async def _feed(self) -> None:
        cfg = self.cfg
        queued, shown = 0, 0
        until = None if cfg.max_seconds is None else time.monotonic() + cfg.max_seconds
        while queued < cfg.runs:
            if until is not None and time.monotonic() > until:
                say(f"soak: time budget spent: {queued} Runs queued of {cfg.runs}")
                self.target = queued
                break
            await asyncio.to_thread(self._count_ended)
            room = min(cfg.backlog - (queued - self.ended), cfg.runs - queued)
            if room >= min(32, cfg.runs - queued):
                await asyncio.to_thread(self._queue, queued, room)
                queued += room
            else:
                await asyncio.sleep(0.2)
            if self.ended - shown >= max(1000, cfg.runs // 20):
                shown = self.ended
                last = self.samples[-1] if self.samples else None
                say(f"soak: {self.ended} Runs ended" + (f", Worker RSS {last.rss_kib / 1024:.1f} MiB, fds {last.fds}, "
                    f"journal {last.journal_records} records" if last else ""))  # fmt: skip

    async def _faults(self) -> None:
        """The restarts (in the first eighth of the Runs), then the disk-full episode (at a quarter), as Runs end."""
        cfg = self.cfg
        restart_at = [cfg.runs * (k + 1) // (8 * (cfg.restarts + 1)) for k in range(cfg.restarts)]
        disk_at = [cfg.runs // 4] if cfg.disk_full else []
        while restart_at or disk_at:
            ended = await asyncio.to_thread(self._count_ended)
            if restart_at and ended >= restart_at[0]:
                restart_at.pop(0)
                await self._restart()
            elif not restart_at and disk_at and ended >= disk_at[0]:
                disk_at.pop(0)
                await self._disk_full()
            else:
                await asyncio.sleep(0.2)

    async def _restart(self) -> None:
        """SIGKILL the Worker mid-work and start it again at once (its tasks keep running; it adopts them)."""
        assert self.popen is not None
        self.popen.kill()
        await asyncio.to_thread(self.popen.wait)
        await asyncio.sleep(0.2)
        self._start_worker()
        self.restarts_done += 1
        say(f"soak: Worker SIGKILLed at {self.ended} Runs ended and restarted (pid {self.pid})")

    async def _disk_full(self) -> None:
        """Fill the tmpfs until less than min_free_mib stays free; the Worker must stop pulling (`disk.low` in its
        log) and go on once the filler is gone (`disk.ok`)."""
        cfg = self.cfg
        offset = self.log.stat().st_size
        st = os.statvfs(self.work_dir)
        free = st.f_bavail * st.f_frsize
        filler = self.work_dir.parent / "filler"
        size = max(0, free - (cfg.min_free_mib // 2) * MIB)
        with filler.open("wb") as out:
            for _ in range(size // MIB):
                out.write(b"\0" * MIB)
        seen_low = await self._log_says(b'"disk.low"', offset, 30.0)
        ended_before = await asyncio.to_thread(self._count_ended)
        await asyncio.sleep(cfg.disk_full_hold_s)
        filler.unlink()
        seen_ok = await self._log_says(b'"disk.ok"', offset, 30.0)
        if seen_low and seen_ok:
            self.disk_full_episodes += 1
        say(f"soak: disk-full episode ({size // MIB} MiB filler): disk.low {seen_low}, disk.ok {seen_ok}, "
            f"{self.ended - ended_before} Runs ended while held (only those taken before it)")  # fmt: skip

    async def _log_says(self, word: bytes, offset: int, within: float) -> bool:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            with self.log.open("rb") as f:
                f.seek(offset)
                if word in f.read():
                    return True
            await asyncio.sleep(0.1)
        return False

    async def _wait_clean(self) -> None:
        """Retention keeps nothing of a Run once it ended (keep_files_seconds = 0): wait until work_dir is empty
        of launches (bounded)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            launches = [p for p in self.work_dir.iterdir() if p.name not in ("tasks", "bundles")]
            tasks = list((self.work_dir / "tasks").iterdir()) if (self.work_dir / "tasks").exists() else []
            if not launches and not tasks:
                return
            await asyncio.sleep(0.5)

    async def _idle_rss(self) -> int:
        """The Worker's VmRSS once it has done nothing but tick for idle_s (heartbeats and empty pulls)."""
        await asyncio.sleep(self.cfg.idle_s)
        return _status_kib(self.pid, "VmRSS")

    # -- background --

    async def _sample(self) -> None:
        pid = self.pid
        rss = _status_kib(pid, "VmRSS")
        try:
            fds = len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            return
        records, jbytes = await asyncio.to_thread(self._journal_figures)
        wbytes = await asyncio.to_thread(usage, (self.work_dir,))
        self.samples.append(Sample(time.monotonic(), self.ended, rss, fds, records, jbytes, wbytes, self.incarnation))

    def _journal_figures(self) -> tuple[int, int]:
        files = [Path(f"{self.journal}{end}") for end in ("", "-wal", "-shm")]
        size = sum(f.stat().st_size for f in files if f.exists())
        try:
            conn = sqlite3.connect(f"file:{self.journal}?mode=ro", uri=True, timeout=1)
            try:
                row = conn.execute("select count(*) from inbox").fetchone()
            finally:
                conn.close()
        except sqlite3.Error:
            return -1, size
        return int(row[0]), size

    async def _sampler(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.sample_every_s)
            with contextlib.suppress(OSError):
                await self._sample()

    async def _converger(self) -> None:
        """What pg_cron does every minute, every second: a Lease lost would be recovered (none should be)."""
        conn = await psycopg.AsyncConnection.connect(self.dsn("ql_scheduler"), autocommit=True)
        try:
            while True:
                with contextlib.suppress(psycopg.Error):
                    await conn.execute("call ql_api.converge(64, 16, %s)", (3000,))
                await asyncio.sleep(1.0)
        finally:
            await conn.close()

    async def _reaper(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            reap_orphans(self._tracked())

    def _tracked(self) -> set[int]:
        pids = {self.popen.pid} if self.popen is not None else set()
        if self.shell is not None and self.shell.pid is not None:
            pids.add(self.shell.pid)
        return pids

    async def _shutdown(self) -> None:
        if self.popen is not None:
            await asyncio.to_thread(stop_process, self.popen, 15.0)
        if self.shell is not None:
            await asyncio.to_thread(self.shell.stop)
        for pid in processes_under(self.root):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        await asyncio.sleep(0.1)
        reap_orphans(set())

    # -- the analysis --

    def analyse(self, elapsed_s: float) -> dict[str, Any]:
        executions: Counter[str] = Counter(line.split()[0] for line in self.markers.read_text().splitlines() if line)
        attempts: dict[str, list[tuple[str, int | None, str | None]]] = {}
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            status = {str(r[0]): str(r[1]) for r in conn.execute("select id, status::text from ql.runs").fetchall()}
            for run, a_status, exit_code, error_code in conn.execute(
                "select run_id, status::text, exit_code, error_code from ql.run_attempts order by run_id, attempt_no"
            ).fetchall():
                attempts.setdefault(str(run), []).append((a_status, exit_code, error_code))
        counts: Counter[str] = Counter(executions=sum(executions.values()))
        examples: list[str] = []
        for run, kind in self.run_kind.items():
            ended, atts, ran = status.get(run, "missing"), attempts.get(run, []), executions[run]
            unstarted = [a for a in atts[:-1] if a[2] == NEVER_STARTED]
            last = atts[-1] if atts else ("none", None, None)
            if ended not in TERMINAL:
                bad = "stuck"
            elif any(a[0] == "lost" for a in atts) or len(unstarted) != len(atts) - 1:
                bad = "lost"  # an Attempt lost, or one before the last that is not a start failure
            elif ran > 1:
                bad = "duplicated"
            elif ran == 0 and last[2] == NEVER_STARTED and ended == "failed":
                bad = ""
                counts["ended_unstarted_by_a_restart"] += 1  # a failing task's only Attempt (no retry to give)
            elif ran == 0:
                bad = "lost"
            else:
                want_status, want_exit = KINDS[kind][2]
                bad = "" if ended == want_status and (want_exit is None or last[1] == want_exit) else "wrong"
            counts["retried_after_a_restart"] += len(unstarted) > 0
            if bad:
                counts[bad] += 1
                if len(examples) < 5:
                    examples.append(f"{bad} {kind} {run} {ended} attempts={atts} executions={ran}")
        return self._figures(elapsed_s, counts, examples)

    def _figures(self, elapsed_s: float, counts: Counter[str], examples: list[str]) -> dict[str, Any]:
        cfg = self.cfg
        last = [s for s in self.samples if s.incarnation == self.incarnation]
        warm = [s for s in last if s.ended >= (last[0].ended if last else 0) + cfg.warmup_share * cfg.runs]
        measured = warm or last
        window = max(1, len(measured) // 10)
        start = statistics.median(s.rss_kib for s in measured[:window]) if measured else 0
        end = statistics.median(s.rss_kib for s in measured[-window:]) if measured else 0
        kinds = Counter(self.run_kind.values())
        return {
            "runs": len(self.run_kind),
            "seconds": round(elapsed_s, 1),
            "runs_per_s": round(len(self.run_kind) / elapsed_s, 1) if elapsed_s else 0.0,
            "kinds": dict(sorted(kinds.items())),
            "worker_rss_start_mib": mib(start),
            "worker_rss_end_mib": mib(end),
            "worker_rss_growth_pct": round(100 * (end - start) / start, 1) if start else 0.0,
            "worker_rss_max_mib": mib(max((s.rss_kib for s in self.samples), default=0)),
            "worker_rss_window_runs": [measured[0].ended, measured[-1].ended] if measured else [],
            "worker_fds_max": max((s.fds for s in self.samples), default=0),
            "worker_fds_end": self.samples[-1].fds if self.samples else 0,
            "journal_records_max": max((s.journal_records for s in self.samples), default=0),
            "journal_records_end": self.samples[-1].journal_records if self.samples else 0,
            "journal_bytes_max": max((s.journal_bytes for s in self.samples), default=0),
            "journal_bytes_end": self.samples[-1].journal_bytes if self.samples else 0,
            "work_dir_bytes_max": max((s.work_dir_bytes for s in self.samples), default=0),
            "work_dir_bytes_end": self.samples[-1].work_dir_bytes if self.samples else 0,
            "disk_full_episodes": self.disk_full_episodes,
            "worker_restarts": self.restarts_done,
            "lost": counts["lost"],
            "stuck": counts["stuck"],
            "duplicated": counts["duplicated"],
            "wrong_outcomes": counts["wrong"],
            "retried_after_a_restart": counts["retried_after_a_restart"],
            "ended_unstarted_by_a_restart": counts["ended_unstarted_by_a_restart"],
            "executions": counts["executions"],
            "worker_idle_rss_fresh_mib": mib(self.idle_rss_kib.get("fresh", 0)),
            "worker_idle_rss_after_mib": mib(self.idle_rss_kib.get("after", 0)),
            "worker_idle_rss_mib": mib(max(self.idle_rss_kib.values(), default=0)),
            "samples": len(self.samples),
            "config": {
                "capacity": cfg.capacity,
                "tick_s": cfg.tick_s,
                "lease_ttl_ms": cfg.lease_ttl_ms,
                "backlog": cfg.backlog,
                "tmpfs_mib": cfg.tmpfs_mib if cfg.disk_full else None,
                "min_free_mib": cfg.min_free_mib if cfg.disk_full else None,
            },
            "examples": examples,
        }


def mib(kib: float) -> float:
    return round(kib / 1024, 1)


def _status_kib(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def run_soak(env: Env, database: str, config: SoakConfig, root: Path) -> dict[str, Any]:
    """Set up and run the engine on `database` (deployed, in env's cluster); its figures."""
    engine = Soak(env, database, config, root)
    try:
        engine.setup()
        with child_subreaper():
            return asyncio.run(engine.run())
    finally:
        if engine.mounted:
            subprocess.run(["umount", "-l", str(root / "tmpfs")], check=False)
