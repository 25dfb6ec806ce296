"""`qinglong shell serve --config FILE`: run the worker-ingress, user-API and admin listeners over one
database pool until SIGTERM/SIGINT. Touches the network (its three listeners) and the database."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from aiohttp import web

from qinglong.shell.app import make_admin_app, make_app
from qinglong.shell.config import ShellConfig, load
from qinglong.shell.db import Database
from qinglong.shell.tls import server_context
from qinglong.wire.logline import configure as configure_logging


async def serve(config: ShellConfig, *, ready: asyncio.Event | None = None) -> None:
    """Serve until cancelled or signalled; every listener shares one pool."""
    db = Database(config.dsn, max_size=config.pool_size)
    await db.open()
    runners: list[web.AppRunner] = []
    try:
        sites = (
            (make_app("worker", db, config.cluster_secret), config.worker, True),
            (make_app("user", db, config.cluster_secret), config.user, False),
            (make_admin_app(db), config.admin, None),
        )
        for app, listener, mtls in sites:
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            runners.append(runner)
            ssl = None
            if mtls is not None:
                assert listener.certificate is not None and listener.key is not None
                ssl = server_context(listener.certificate, listener.key, client_ca=listener.client_ca if mtls else None)
            await web.TCPSite(runner, listener.host, listener.port, ssl_context=ssl).start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if ready is not None:
            ready.set()
        await stop.wait()
    finally:
        for runner in reversed(runners):
            await runner.cleanup()
        await db.close()


def main(config_path: Path) -> None:
    configure_logging()
    asyncio.run(serve(load(config_path)))
