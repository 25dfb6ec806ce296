"""(d) A Worker supervising a journal of 1,000 records: CPU time and RSS per tick of the headless
lifecycle (page sizes 16 and 64), without a network.

Two journals: *terminal* (every record completed, control_plane_terminal or lease-lost: the
lifecycle must make no call for them) and *mixed* (the same, but 5 % `running_acknowledged` records
whose process exited and left its status file, and 5 % whose process vanished without one). Records
that need calls get them from `CountingClient`, a fake of the Worker's HTTPS client used in THIS
benchmark only: it answers at once like a healthy control plane and counts every call.

Run as `python -m bench.worker_supervision tick JOURNAL WORK_DIR PAGE TICKS` it is one measured
Worker process: it imports only what `qinglong-worker run` imports (no psycopg), starts the
lifecycle over a copy of a journal, ticks, and prints one JSON line.

Touches: a folder it is given (journals, fake task logs and status files), its children.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from qinglong.wire import (
    ActivationRequest,
    ActivationResponse,
    ActivationStartFailureRequest,
    CompletionRequest,
    CompletionResponse,
    LeaseControlRequest,
    LeaseControlResponse,
    LeaseRenewed,
    OfferOffered,
    OfferResponse,
    OutputAppended,
    OutputAppendRequest,
    Snapshot,
    WorkerSessionAlive,
    ql3w,
)
from qinglong.wire.activation import Executor as ExecutorRevision
from qinglong.wire.offer import Offer, OfferEmpty, Plan
from qinglong.worker.client import Credentials, IngressClient, Session, TransportError
from qinglong.worker.controller import LocalProcessController
from qinglong.worker.executor import Executor
from qinglong.worker.identity import boot_id
from qinglong.worker.inbox import Inbox
from qinglong.worker.journal import STATES, Journal, State
from qinglong.worker.lifecycle import Lifecycle

if TYPE_CHECKING:
    from bench.report import Result

PAGES = (16, 64)
CAPACITY = 8
LEASE_TTL_MS = 30_000
Kind = Literal["completed", "control_plane_terminal", "lease_lost", "exited", "vanished"]
TERMINAL_KINDS: dict[str, State] = {
    "completed": "completed",
    "control_plane_terminal": "control_plane_terminal",
    "lease_lost": "lease_lost_local_execution_stopped",
}


def now_ms() -> int:
    return int(time.time() * 1000)


def vm_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


# -- the fake client (this benchmark only) --------------------------------------------------------


class _NoCredentials:
    def load(self) -> Credentials:
        raise TransportError("no network in this benchmark")


def snapshot(offer: Offer, *, ended: bool, lease_version: int) -> Snapshot:
    t = now_ms()
    return Snapshot(
        project_id=offer.project_id, run_id=offer.run_id, attempt_id=offer.attempt_id, offer_id=offer.offer_id,
        attempt_no=offer.attempt_no, run_status="succeeded" if ended else "running",
        attempt_status="succeeded" if ended else "running", attempt_version=lease_version + 3,
        lease_generation=offer.lease_generation, lease_version=lease_version, lease_expires_at_ms=t + LEASE_TTL_MS,
        callback_sequence=3 if ended else 2, deadline_at_ms=None, started_at_ms=t - 2000, running_at_ms=t - 1900,
        ended_at_ms=t if ended else None, exit_code=0 if ended else None, error_code=None,
        cancel_requested_at_ms=None, cancel_reason=None,
        executor=ExecutorRevision(kind="process", version=1), artifacts=(),
    )  # fmt: skip


class CountingClient(IngressClient):
    """Answers every call at once as a healthy control plane would, and counts the calls."""

    def __init__(self) -> None:
        super().__init__("https://127.0.0.1:9", str(uuid.uuid4()), _NoCredentials())
        self.calls: Counter[str] = Counter()
        self.completions: Counter[str] = Counter()  # by error code, or "exit N"

    async def close(self) -> None:
        self.calls["close"] += 1

    async def open_session(self, *, capacity: int, generation: int) -> Session:
        self.calls["open_session"] += 1
        return Session(str(uuid.uuid4()), generation, secrets.token_bytes(32), now_ms() + 120_000)

    async def heartbeat(self, session: Session) -> WorkerSessionAlive:
        self.calls["heartbeat"] += 1
        return WorkerSessionAlive(session_id=session.session_id, expires_at_ms=now_ms() + 120_000)

    async def pull(self, session: Session, pull_id: str) -> OfferResponse:
        self.calls["pull"] += 1
        return OfferEmpty(reason="no_work")

    async def activate(
        self,
        session: Session,
        offer_id: str,
        phase: Literal["starting", "running", "start-failure"],
        body: ActivationRequest | ActivationStartFailureRequest,
    ) -> ActivationResponse:
        self.calls["activate"] += 1
        raise TransportError("no record of these journals needs an activation")

    async def lease_control(
        self, session: Session, body: LeaseControlRequest, *, timeout_s: float | None = None
    ) -> LeaseControlResponse:
        self.calls["lease_control"] += 1
        t = now_ms()
        return LeaseRenewed(
            lease_version=body.expected_version + 1,
            renewed_at_ms=t,
            expires_at_ms=t + LEASE_TTL_MS,
            deadline_at_ms=None,
        )

    async def append_output(
        self, session: Session, offer_id: str, body: OutputAppendRequest, *, timeout_s: float | None = None
    ) -> OutputAppended:
        self.calls["append_output"] += 1
        end = body.offset + len(body.data)
        return OutputAppended(stream=body.stream, next_offset=end, head_bytes=64 * 1024, tail_bytes=64 * 1024)

    async def complete(self, session: Session, offer_id: str, body: CompletionRequest) -> CompletionResponse:
        self.calls["complete"] += 1
        self.completions[body.error_code or f"exit {body.exit_code}"] += 1
        t = now_ms()
        offer = Offer(
            offer_id=offer_id, project_id=body.project_id, run_id=body.run_id, attempt_id=body.attempt_id,
            attempt_no=1, lease_generation=body.lease_generation, lease_version=body.lease_version,
            offered_at_ms=t, lease_expires_at_ms=t, offer_expires_at_ms=t, plan=Plan(argv=("true",)),
        )  # fmt: skip
        return CompletionResponse(
            status="completed", run_status="succeeded", attempt_status="succeeded",
            snapshot=snapshot(offer, ended=True, lease_version=body.lease_version),
        )  # fmt: skip


# -- the journals ---------------------------------------------------------------------------------


def _mix(i: int, scenario: str) -> Kind:
    slot = i % 20
    if slot == 5:
        return "control_plane_terminal"
    if slot == 15:
        return "lease_lost"
    if scenario == "mixed" and slot == 0:
        return "exited"
    if scenario == "mixed" and slot == 10:
        return "vanished"
    return "completed"


def build_journal(path: Path, work: Path, records: int, scenario: str, dead_pid: int) -> Counter[str]:
    """A journal of `records` offers in the scenario's states, with durable process handles whose
    process is gone; `exited` ones left their status file (exit 0) and a log."""
    kinds: Counter[str] = Counter()
    boot = boot_id()
    session = str(uuid.uuid4())
    executor = Executor(work)
    with Journal.open(path) as journal:
        for i in range(records):
            kind = _mix(i, scenario)
            kinds[kind] += 1
            t = now_ms()
            offer = Offer(
                offer_id=str(uuid.uuid4()), project_id=str(uuid.uuid4()), run_id=str(uuid.uuid4()),
                attempt_id=str(uuid.uuid4()), attempt_no=1, lease_generation=1, lease_version=1,
                offered_at_ms=t, lease_expires_at_ms=t + LEASE_TTL_MS, offer_expires_at_ms=t + LEASE_TTL_MS,
                plan=Plan(argv=("sh", "-c", "echo hello from a task"), env={"LANG": "C.UTF-8"}),
            )  # fmt: skip
            offered = OfferOffered(offer=offer, lease_token=ql3w.b64url(secrets.token_bytes(32)))
            nonce = secrets.token_hex(16)
            log, status = executor.paths(offer.offer_id, nonce)
            handle = {
                "pid": dead_pid, "pgid": dead_pid, "start_time": 1, "boot_id": boot, "log_path": str(log),
                "status_path": str(status), "launch_nonce": nonce,
            }  # fmt: skip
            inbox = Inbox(
                offer=offered, session_id=session, lease_version=2, boot_id=boot, launch_nonce=nonce, handle=handle,
                snapshot=snapshot(offer, ended=False, lease_version=1).to_obj(),
            )  # fmt: skip
            state: State = "running_acknowledged"
            if kind in ("exited", "vanished"):
                log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                log.write_bytes(b"hello from a task\n")
                if kind == "exited":
                    status.write_text(json.dumps({"exitCode": 0, "signal": None}))
            else:
                state = TERMINAL_KINDS[kind]
                inbox = inbox.replace(
                    lease_version=3,
                    snapshot=snapshot(offer, ended=True, lease_version=3).to_obj(),
                    exit_code=0,
                    reason={"completed": "completed", "control_plane_terminal": "fenced.stale_version"}.get(
                        kind, "local lease expired: stopped"
                    ),
                )
            journal.insert(offer.offer_id, state, inbox.to_data())
    return kinds


# -- the measured Worker process ------------------------------------------------------------------


async def _measure(journal: Path, work: Path, page: int, ticks: int) -> dict[str, Any]:
    rss_imported = vm_kb("VmRSS")
    client = CountingClient()
    lifecycle = Lifecycle(
        journal_path=journal, client=client, executor=Executor(work),
        controller=LocalProcessController(grace_s=0.1), generation=1, capacity=CAPACITY, page_size=page,
    )  # fmt: skip
    cpu0, wall0 = time.process_time(), time.perf_counter()
    await lifecycle.start()
    start_cpu, start_wall = time.process_time() - cpu0, time.perf_counter() - wall0
    start_calls = dict(client.calls)
    rss_started = vm_kb("VmRSS")
    cpu: list[float] = []
    wall: list[float] = []
    rss: list[int] = []
    for _ in range(ticks):
        c, w = time.process_time(), time.perf_counter()
        await lifecycle.tick()
        cpu.append((time.process_time() - c) * 1000)
        wall.append((time.perf_counter() - w) * 1000)
        rss.append(vm_kb("VmRSS"))
    tick_calls = {k: v - start_calls.get(k, 0) for k, v in client.calls.items() if v - start_calls.get(k, 0)}
    events = len(lifecycle.events)
    await lifecycle.stop()
    with Journal.open(journal) as j:
        states = {s: n for s in STATES if (n := j.count(states=[s]))}
    return {
        "page": page,
        "ticks": ticks,
        "start_cpu_ms": start_cpu * 1000,
        "start_wall_ms": start_wall * 1000,
        "start_calls": start_calls,
        "tick_cpu_ms": cpu,
        "tick_wall_ms": wall,
        "tick_calls": tick_calls,
        "rss_imported_kb": rss_imported,
        "rss_started_kb": rss_started,
        "rss_max_kb": max(rss),
        "rss_end_kb": rss[-1],
        "vmhwm_kb": vm_kb("VmHWM"),
        "lifecycle_events": events,
        "completions": dict(client.completions),
        "states": states,
        "failed_closed": lifecycle.failed_closed,
    }


def child(journal: Path, work: Path, page: int, ticks: int) -> int:
    print(json.dumps(asyncio.run(_measure(journal, work, page, ticks))), flush=True)
    return 0


# -- the parent -----------------------------------------------------------------------------------


def run(root: Path, records: int, ticks: int) -> Result:
    from bench.report import Result, fmt, percentile, table
    from tests.support.env import REPO
    from tests.support.progress import say

    folder = root / "worker"
    folder.mkdir(mode=0o700)
    work = folder / "runs"
    gone = subprocess.Popen(["true"])  # its pid, once reaped, is a process that is gone
    gone.wait()
    templates: dict[str, Path] = {}
    mixes: dict[str, Counter[str]] = {}
    for scenario in ("terminal", "mixed"):
        path = folder / f"template-{scenario}" / "inbox.sqlite"
        started = time.perf_counter()
        mixes[scenario] = build_journal(path, work, records, scenario, gone.pid)
        templates[scenario] = path
        say(f"(d) journal '{scenario}': {records:,} records written in {time.perf_counter() - started:.1f} s")

    outcomes: list[tuple[str, dict[str, Any]]] = []
    for scenario, template in templates.items():
        for page in PAGES:
            target = folder / f"{scenario}-{page}" / "inbox.sqlite"
            target.parent.mkdir(mode=0o700)
            shutil.copy2(template, target)
            out = subprocess.run(
                [sys.executable, "-m", "bench.worker_supervision", "tick", str(target), str(work), str(page),
                 str(ticks)],
                capture_output=True, text=True, cwd=REPO, check=False,
            )  # fmt: skip
            if out.returncode != 0:
                raise RuntimeError(f"the measured Worker failed:\n{out.stderr[-3000:]}")
            result = json.loads(out.stdout.strip().splitlines()[-1])
            outcomes.append((scenario, result))
            cpu = result["tick_cpu_ms"]
            say(
                f"(d) {scenario}, page {page}: {sum(cpu) / len(cpu):.2f} ms CPU a tick (p99 {percentile(cpu, 99):.2f}),"
                f" RSS {result['rss_end_kb'] / 1024:.1f} MiB"
            )

    rows = []
    for scenario, r in outcomes:
        cpu, wall = r["tick_cpu_ms"], r["tick_wall_ms"]
        calls = ", ".join(f"{k} {v}" for k, v in sorted(r["tick_calls"].items())) or "none"
        at_start = ", ".join(f"{k} {v}" for k, v in sorted(r["start_calls"].items())) or "none"
        rows.append(
            [scenario, str(r["page"]), fmt(r["start_cpu_ms"], 1), fmt(r["start_wall_ms"], 1),
             fmt(sum(cpu) / len(cpu), 2), fmt(percentile(cpu, 50), 2), fmt(percentile(cpu, 99), 2), fmt(max(cpu), 2),
             fmt(sum(wall) / len(wall), 2), fmt(max(wall), 2),
             f"{r['rss_imported_kb'] / 1024:.1f} / {r['rss_started_kb'] / 1024:.1f} / {r['rss_max_kb'] / 1024:.1f}",
             fmt((r["rss_end_kb"] - r["rss_started_kb"]) / len(cpu), 1), at_start, calls]
        )  # fmt: skip
    main = table(
        ["journal", "page", "start() CPU ms", "start() wall ms", "tick CPU ms mean", "p50", "p99", "max",
         "tick wall ms mean", "max", "RSS MiB imported / started / max", "RSS kB per tick",
         "client calls in start()", "client calls in the ticks"],
        rows,
    )  # fmt: skip
    mixed = [r for s, r in outcomes if s == "mixed"]
    terminal = [r for s, r in outcomes if s == "terminal"]
    vanished = mixes["mixed"]["vanished"]
    states = ", ".join(f"{k} {v}" for k, v in sorted(mixed[-1]["states"].items())) if mixed else ""
    mix_text = ", ".join(f"{k} {v}" for k, v in sorted(mixes["mixed"].items()))
    renewals = [r["start_calls"].get("lease_control", 0) + r["tick_calls"].get("lease_control", 0) for r in mixed]
    notes = [
        f"*terminal* journal: {', '.join(f'{k} {v}' for k, v in sorted(mixes['terminal'].items()))}. "
        f"*mixed*: {mix_text}; `exited` and `vanished` records are `running_acknowledged` with a durable handle "
        "whose process is gone (`exited` left its status file with exit code 0 and a log; `vanished` left none, "
        "as when the runner wrapper is SIGKILLed).",
        f"Each (journal, page) is a fresh copy of the journal and a fresh Worker process "
        f"(`python -m bench.worker_supervision tick …`): `start()` pages the whole journal, then {ticks} ticks; "
        "CPU is `time.process_time()` around each `tick()`, RSS is VmRSS after it. "
        "Calls are those the fake client counted in `start()` and in the ticks.",
    ]
    if terminal and all(not set(r["tick_calls"]) - {"heartbeat", "pull"} for r in terminal):
        notes.append(
            "Terminal records cost no call: the ticks over the *terminal* journal made only the heartbeat and "
            "the one pull a tick."
        )
    if mixed and vanished and min(renewals) > 0:
        notes.append(
            f"**Finding**: the {vanished} `vanished` records were renewed again and again "
            f"({' and '.join(str(n) for n in renewals)} lease-control calls over start() and the ticks for page "
            f"{' and '.join(str(r['page']) for r in mixed)}) and stay `running_acknowledged` ({states} at the end): "
            "the coordinator learns that a process ended only from its status file, never from the process "
            "table (`LocalProcessController.verify` runs only inside `stop`), so a task whose wrapper died without "
            "one keeps its Lease renewed and its Run `running` indefinitely; a Worker restart resumes the same "
            "renewals, only a reboot (a new boot id) ends them."
        )
    elif mixed and vanished:
        done = ", ".join(f"{k}: {v}" for k, v in sorted(mixed[-1]["completions"].items())) or "none"
        notes.append(
            f"The `exited` and `vanished` records were completed (completions sent: {done}) and no lease-control "
            f"call was made for them; the *mixed* journal ended as {states}."
        )
    if outcomes:
        held = [r["lifecycle_events"] for _, r in outcomes]
        growth = (
            "it grows by one or two entries a tick for as long as the Worker runs" if max(held) >= ticks else "bounded"
        )
        notes.append(f"`Lifecycle.events` held {' / '.join(map(str, held))} entries after {ticks} ticks: {growth}.")
    markdown = (
        "## (d) A Worker supervising its journal\n\n"
        f"{records:,} journal records (SQLite, WAL, synchronous=FULL), the headless lifecycle with capacity "
        f"{CAPACITY}, no network: records that need calls get them from a fake client (`CountingClient`, this "
        "benchmark only) that answers at once as a healthy control plane would.\n\n"
        f"{main}\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    )
    summary = [
        "(d) CPU per tick: "
        + "; ".join(
            f"{s} page {r['page']} {sum(r['tick_cpu_ms']) / len(r['tick_cpu_ms']):.2f} ms "
            f"(RSS {r['rss_end_kb'] / 1024:.0f} MiB)"
            for s, r in outcomes
        )
    ]
    return Result(markdown, summary, {"outcomes": outcomes})


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "tick":
        os.umask(0o077)
        sys.exit(child(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])))
    sys.exit("usage: python -m bench.worker_supervision tick JOURNAL WORK_DIR PAGE TICKS")
