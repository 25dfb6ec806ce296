"""`qinglong shell serve --config FILE`: run the worker-ingress, user-API and admin listeners over one
database pool until SIGTERM/SIGINT, each listener within its connection budget (qinglong.shell.listener).
With `processes` > 1 in shell.toml, run that many such processes under one parent instead
(qinglong.shell.processes). Touches the network (its three listeners), the process's RLIMIT_NOFILE and
the database; with `processes` > 1 also what qinglong.shell.processes touches.

The shell's own modules are imported inside the functions: with `processes` > 1, PROMETHEUS_MULTIPROC_DIR
must be set before prometheus_client is first imported (it picks where metric values live at import).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Final

from qinglong.shell.config import Listener, ShellConfig, load
from qinglong.wire.logline import configure as configure_logging

if TYPE_CHECKING:
    from aiohttp import web

    from qinglong.shell.listener import BudgetedListener

MULTIPROC_DIR: Final = "PROMETHEUS_MULTIPROC_DIR"


async def serve(
    config: ShellConfig,
    *,
    ready: asyncio.Event | None = None,
    listeners: dict[str, BudgetedListener] | None = None,
    parent: int | None = None,
) -> None:
    """Serve until cancelled or signalled; every listener shares one pool. `listeners`, when given, is
    filled with the running listeners by name (worker, user, admin) before `ready` is set. `parent`: this
    is a child of a shell of several processes, and `parent` the read end of a pipe that only the parent
    holds open: serve the worker and user listeners only, bound with SO_REUSEPORT, and stop at the pipe's
    EOF (the parent is gone) as at SIGTERM."""
    from aiohttp import web

    from qinglong.shell.app import make_admin_app, make_app
    from qinglong.shell.db import Database
    from qinglong.shell.listener import BudgetedListener, ensure_fd_limit
    from qinglong.shell.tls import server_context

    ensure_fd_limit(config)
    db = Database.of(config)
    await db.open()
    runners: list[web.AppRunner] = []
    running: list[BudgetedListener] = []
    loop = asyncio.get_running_loop()
    try:
        sites: list[tuple[str, web.Application, Listener, bool | None]] = [
            ("worker", make_app("worker", db, config.cluster_secret), config.worker, True),
            ("user", make_app("user", db, config.cluster_secret), config.user, False),
        ]
        if parent is None:
            sites.append(("admin", make_admin_app(db), config.admin, None))
        for name, app, listener, mtls in sites:
            ssl = None
            if mtls is not None:
                assert listener.certificate is not None and listener.key is not None
                ssl = server_context(listener.certificate, listener.key, client_ca=listener.client_ca if mtls else None)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            runners.append(runner)
            assert runner.server is not None
            budgeted = BudgetedListener(name, runner.server, listener.budget, ssl)
            running.append(budgeted)
            await budgeted.start(listener.host, listener.port, reuse_port=parent is not None)
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if parent is not None:
            loop.add_reader(parent, stop.set)  # readable only at EOF: the parent never writes
        if listeners is not None:
            listeners.update({b.name: b for b in running})
        if ready is not None:
            ready.set()
        await stop.wait()
    finally:
        if parent is not None:
            loop.remove_reader(parent)
        for budgeted in running:
            await budgeted.stop()
        for runner in reversed(runners):
            await runner.cleanup()
        await db.close()


def main(config_path: Path) -> int:
    """Serve as shell.toml says; the exit code (0 after SIGTERM/SIGINT). ConfigError or OSError (a listener
    cannot bind) when the shell cannot start."""
    configure_logging()
    config = load(config_path)
    if config.processes == 1:
        asyncio.run(serve(config))
        return 0
    if "prometheus_client" in sys.modules:
        raise RuntimeError("prometheus_client was imported before PROMETHEUS_MULTIPROC_DIR was set")
    os.environ[MULTIPROC_DIR] = tempfile.mkdtemp(prefix="qinglong-shell-metrics-")  # the children inherit it
    from qinglong.shell.processes import supervise

    return asyncio.run(supervise(config, config_path))
