"""`qinglong shell serve --config FILE`: run the worker-ingress, user-API and admin listeners over one
database pool until SIGTERM/SIGINT, each listener within its connection budget (qinglong.shell.listener).
Touches the network (its three listeners), the process's RLIMIT_NOFILE and the database."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from aiohttp import web

from qinglong.shell.app import make_admin_app, make_app
from qinglong.shell.config import ShellConfig, load
from qinglong.shell.db import Database
from qinglong.shell.listener import BudgetedListener, ensure_fd_limit
from qinglong.shell.tls import server_context
from qinglong.wire.logline import configure as configure_logging


async def serve(
    config: ShellConfig,
    *,
    ready: asyncio.Event | None = None,
    listeners: dict[str, BudgetedListener] | None = None,
) -> None:
    """Serve until cancelled or signalled; every listener shares one pool. `listeners`, when given, is
    filled with the running listeners by name (worker, user, admin) before `ready` is set."""
    ensure_fd_limit(config)
    db = Database.of(config)
    await db.open()
    runners: list[web.AppRunner] = []
    running: list[BudgetedListener] = []
    try:
        sites = (
            ("worker", make_app("worker", db, config.cluster_secret), config.worker, True),
            ("user", make_app("user", db, config.cluster_secret), config.user, False),
            ("admin", make_admin_app(db), config.admin, None),
        )
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
            await budgeted.start(listener.host, listener.port)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if listeners is not None:
            listeners.update({b.name: b for b in running})
        if ready is not None:
            ready.set()
        await stop.wait()
    finally:
        for budgeted in running:
            await budgeted.stop()
        for runner in reversed(runners):
            await runner.cleanup()
        await db.close()


def main(config_path: Path) -> None:
    configure_logging()
    asyncio.run(serve(load(config_path)))
