"""A shell of several processes (shell.toml `processes` > 1; docs/decisions/0008-shell-processes.md).

The parent, which `qinglong shell serve` runs (systemd's main process), starts that many children
(`python -m qinglong.shell.processes`), each a whole shell but for the admin listener (qinglong.shell.server
with `parent`): its own database pool and connection budgets, the worker and user listeners bound with
SO_REUSEPORT on the configured ports, so the kernel spreads accepted connections among them. The parent
serves the one admin listener: /metrics sums every process's values (prometheus_client's multiprocess
mode: each process writes its values to files in PROMETHEUS_MULTIPROC_DIR, a folder the parent made), and
/healthz answers 200 only while every child is listening and alive and the database answers (the parent's
own pool of one connection).

SIGHUP to the parent is sent on to every child, which reloads its secrets and TLS files (qinglong.shell.server).
SIGTERM or SIGINT to the parent: it sends SIGTERM to every child, each stops as one shell does (no more
accepts, requests in flight finish, the pool closes), and the parent exits 0 once all have, within
STOP_BUDGET_S (else it SIGKILLs the rest and exits 1). A child that exits by itself is not restarted: the
parent stops the others and exits with the child's code when it is 2 (configuration) or 3 (cannot listen),
1 otherwise, and systemd restarts the unit. No child outlives the parent: each watches the read end of a
pipe whose only write end the parent holds, and stops at its EOF, which the kernel delivers however the
parent ended (SIGKILL included).

Touches: the network (the admin listener), child processes, the folder of metric files (removed at
exit), the database (the children's pools and the parent's one connection) and the log (stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Final

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from qinglong.shell.app import make_admin_app
from qinglong.shell.config import ConfigError, ShellConfig, load
from qinglong.shell.db import Database
from qinglong.shell.listener import BudgetedListener
from qinglong.shell.server import serve
from qinglong.wire.logline import configure as configure_logging
from qinglong.wire.logline import emit

log = logging.getLogger("qinglong.shell")

STOP_BUDGET_S: Final = 25.0  # SIGTERM → every child gone; below the unit's TimeoutStopSec (30 s)
KEPT_CODES: Final = (2, 3)  # a child's exit code the parent exits with: configuration error, cannot listen


async def supervise(config: ShellConfig, config_path: Path, folder: str) -> int:
    """Run `config.processes` children and the admin listener until SIGTERM/SIGINT or a child's exit; the
    parent's exit code. `folder`: PROMETHEUS_MULTIPROC_DIR, the metric files' folder (removed at exit).
    OSError when the admin listener cannot bind (before any child starts)."""
    loop = asyncio.get_running_loop()
    children: list[asyncio.subprocess.Process] = []
    listening = 0  # children that signalled they listen (one byte each on the ready pipe)
    death_r, death_w = os.pipe()  # the children read; only the parent holds the write end
    ready_r, ready_w = os.pipe()  # the children write one byte once listening

    def up() -> bool:
        return listening == config.processes and all(child.returncode is None for child in children)

    def on_ready() -> None:
        nonlocal listening
        got = os.read(ready_r, 64)
        listening += len(got)
        if not got:  # every child closed its end
            loop.remove_reader(ready_r)

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=folder)  # type: ignore[no-untyped-call]
    db = Database(config.dsn, max_size=1, prepared_statements=config.prepared_statements)
    runner = web.AppRunner(make_admin_app(db, registry=registry, processes_up=up), access_log=None)
    admin: BudgetedListener | None = None
    try:
        await db.open()
        await runner.setup()
        assert runner.server is not None
        admin = BudgetedListener("admin", runner.server, config.admin.budget, None)
        await admin.start(config.admin.host, config.admin.port)
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGHUP, _forward, children, signal.SIGHUP)
        loop.add_reader(ready_r, on_ready)
        argv = ["--config", str(config_path), "--parent", str(death_r), "--ready", str(ready_w)]
        for _ in range(config.processes):
            children.append(
                await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "qinglong.shell.processes", *argv, pass_fds=(death_r, ready_w)
                )
            )
        os.close(ready_w)
        ready_w = -1
        return await _run(children, stop)
    finally:
        for fd in (death_r, death_w, ready_r, ready_w):
            if fd >= 0:
                loop.remove_reader(fd)
                os.close(fd)
        for child in children:  # a failure above: no child is left behind
            if child.returncode is None:
                child.kill()
                await child.wait()
        if admin is not None:
            await admin.stop()
        await runner.cleanup()
        await db.close()
        shutil.rmtree(folder, ignore_errors=True)


def _forward(children: list[asyncio.subprocess.Process], sig: int) -> None:
    """SIGHUP to the parent: every live child reloads (qinglong.shell.server); the parent has nothing to reload."""
    for child in children:
        if child.returncode is None:
            child.send_signal(sig)


async def _run(children: list[asyncio.subprocess.Process], stop: asyncio.Event) -> int:
    waits = {asyncio.ensure_future(child.wait()): child for child in children}
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait([stopping, *waits], return_when=asyncio.FIRST_COMPLETED)
    code = 0
    if not stopping.done():  # a child exited by itself
        exited = next(child for task, child in waits.items() if task.done())
        assert exited.returncode is not None
        code = exited.returncode if exited.returncode in KEPT_CODES else 1
        emit(log, logging.ERROR, "shell.process_exited", pid=exited.pid, code=exited.returncode)
    stopping.cancel()
    for child in children:
        if child.returncode is None:
            child.send_signal(signal.SIGTERM)
    _, late = await asyncio.wait(waits, timeout=STOP_BUDGET_S)
    for task in late:
        emit(log, logging.ERROR, "shell.process_killed", pid=waits[task].pid, stop_budget_s=STOP_BUDGET_S)
        waits[task].kill()
        code = code or 1
    await asyncio.gather(*waits)
    # A child killed by SIGTERM before it could handle it (still starting) stopped as asked.
    if any(child.returncode not in (0, -signal.SIGTERM) for child in children):
        code = code or 1
    return code


def _child(argv: list[str]) -> int:
    """A child: serve the worker and user listeners until SIGTERM/SIGINT or the parent's pipe closes."""
    parser = argparse.ArgumentParser(prog="python -m qinglong.shell.processes")
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--ready", type=int, required=True)
    args = parser.parse_args(argv)
    configure_logging()
    try:
        config = load(args.config)
        asyncio.run(_serve_child(config, args.config, args.parent, args.ready))
    except ConfigError as exc:
        print(f"qinglong: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"qinglong: cannot listen: {exc.strerror or exc}", file=sys.stderr)
        return 3
    return 0


async def _serve_child(config: ShellConfig, config_path: Path, parent: int, ready_fd: int) -> None:
    ready = asyncio.Event()
    serving = asyncio.ensure_future(serve(config, ready=ready, parent=parent, config_path=config_path))
    listening = asyncio.ensure_future(ready.wait())
    await asyncio.wait([serving, listening], return_when=asyncio.FIRST_COMPLETED)
    listening.cancel()
    if ready.is_set():
        os.write(ready_fd, b".")
    os.close(ready_fd)
    await serving


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
