"""`qinglong-worker run --config FILE`: one Worker process — one outer cadence calling the headless
lifecycle's tick, SIGTERM/SIGINT → an orderly stop within one shutdown budget. Touches the journal
and work folders named in the config, the credential files, the network and local processes.

    origin = "https://control.example:8443"
    worker_id = "…uuid…"
    generation = 1
    capacity = 2
    certificate = "worker.crt"       # relative paths are relative to this file
    key = "worker.key"
    trust_anchors = "ca.crt"
    journal = "state/inbox.sqlite"
    work_dir = "state/runs"
    tick_seconds = 2.0
    page_size = 16
    shutdown_seconds = 20.0
    stop_grace_seconds = 5.0
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qinglong.worker.client import FileCredentials, WorkerIngressHttpsClient
from qinglong.worker.journal import JournalBusy, JournalError
from qinglong.worker.lifecycle import WorkerRemoteExecutionHeadlessLifecycle
from qinglong.worker.process import Executor, LocalProcessController

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class ConfigError(Exception):
    """A one-line reason the Worker cannot start."""


@dataclass(frozen=True)
class WorkerConfig:
    origin: str
    worker_id: str
    generation: int
    capacity: int
    credentials: FileCredentials
    journal: Path
    work_dir: Path
    tick_seconds: float = 2.0
    page_size: int = 16
    shutdown_seconds: float = 20.0
    stop_grace_seconds: float = 5.0


def load(path: Path) -> WorkerConfig:
    try:
        raw: dict[str, Any] = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    base = path.parent
    try:
        return WorkerConfig(
            origin=str(raw["origin"]),
            worker_id=str(raw["worker_id"]),
            generation=int(raw["generation"]),
            capacity=int(raw.get("capacity", 1)),
            credentials=FileCredentials(base / raw["certificate"], base / raw["key"], base / raw["trust_anchors"]),
            journal=base / raw["journal"],
            work_dir=base / raw["work_dir"],
            tick_seconds=float(raw.get("tick_seconds", 2.0)),
            page_size=int(raw.get("page_size", 16)),
            shutdown_seconds=float(raw.get("shutdown_seconds", 20.0)),
            stop_grace_seconds=float(raw.get("stop_grace_seconds", 5.0)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"bad or missing setting {exc}") from None


async def run(config: WorkerConfig, *, stop: asyncio.Event | None = None) -> int:
    """Run until `stop` is set (or SIGTERM/SIGINT); return the exit code."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in _STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
    client = WorkerIngressHttpsClient(config.origin, config.worker_id, config.credentials)
    lifecycle = WorkerRemoteExecutionHeadlessLifecycle(
        journal_path=config.journal,
        client=client,
        executor=Executor(config.work_dir, stop_grace_s=config.stop_grace_seconds),
        controller=LocalProcessController(grace_s=config.stop_grace_seconds),
        generation=config.generation,
        capacity=config.capacity,
        page_size=config.page_size,
    )
    stopping = asyncio.ensure_future(stop.wait())
    work: asyncio.Future[None] | None = None
    try:
        work = asyncio.ensure_future(lifecycle.start())
        while True:
            # A signal never waits for a slow call: stop() below aborts it and waits for the tick.
            await asyncio.wait({work, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if stop.is_set():
                break
            work.result()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(stopping), config.tick_seconds)
            if stop.is_set():
                break
            work = asyncio.ensure_future(lifecycle.tick())
    finally:
        stopping.cancel()
        if work is not None and not work.done() and not lifecycle.scanned:
            work.cancel()  # a start() still paging the journal: abandon it before releasing ownership
            with contextlib.suppress(asyncio.CancelledError):
                await work
        try:
            await asyncio.wait_for(lifecycle.stop(), config.shutdown_seconds)
            if work is not None and not work.done():
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await work
        except TimeoutError:
            print("qinglong-worker: shutdown budget spent; journal released by exit", file=sys.stderr)
            return 1
    return 3 if lifecycle.failed_closed else 0


def main(argv: Sequence[str] | None = None) -> int:
    # Held pending until run() has its handlers: a SIGTERM during start-up still stops in order.
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        return _main(argv)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)


def _main(argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="qinglong-worker", description="Run a Qinglong remote Worker")
    sub = parser.add_subparsers(dest="command", required=True)
    run_cmd = sub.add_parser("run", help="run until SIGTERM")
    run_cmd.add_argument("--config", type=Path, required=True, help="TOML file (see qinglong.worker.run)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        return asyncio.run(run(load(args.config)))
    except ConfigError as exc:
        print(f"qinglong-worker: {exc}", file=sys.stderr)
        return 2
    except JournalBusy:
        print("qinglong-worker: another Worker process owns this journal", file=sys.stderr)
        return 2
    except JournalError as exc:
        print(f"qinglong-worker: journal: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
