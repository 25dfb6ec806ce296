"""One shell process: the worker-ingress, user-API and admin listeners over one database pool until
SIGTERM/SIGINT, each within its connection budget (qinglong.shell.listener). SIGHUP reloads what a
rotation changes (the cluster secrets, certificates, keys and client CA bundles:
docs/decisions/0012-credential-rotation.md) without dropping a connection. As a child of a shell of
several processes (qinglong.shell.processes) it serves the worker and user listeners only. Touches the
network (its listeners), the process's RLIMIT_NOFILE and the database.

The shell's own modules are imported inside the functions: with `processes` > 1, PROMETHEUS_MULTIPROC_DIR
must be set before prometheus_client is first imported (it picks where metric values live at import).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import ssl
from pathlib import Path
from typing import TYPE_CHECKING, Final

from qinglong.shell.config import ConfigError, Listener, ShellConfig, load
from qinglong.wire import ql3w
from qinglong.wire.logline import emit

if TYPE_CHECKING:
    from aiohttp import web

    from qinglong.shell.listener import BudgetedListener

RESTART_ONLY: Final = ("dsn", "pool_size", "prepared_statements", "processes")  # besides listener addresses, budgets
log = logging.getLogger("qinglong.shell")


async def serve(
    config: ShellConfig,
    *,
    ready: asyncio.Event | None = None,
    listeners: dict[str, BudgetedListener] | None = None,
    parent: int | None = None,
    config_path: Path | None = None,
) -> None:
    """Serve until cancelled or signalled; every listener shares one pool. `listeners`, when given, is
    filled with the running listeners by name (worker, user, admin) before `ready` is set. `parent`: this
    is a child of a shell of several processes, and `parent` the read end of a pipe that only the parent
    holds open: serve the worker and user listeners only, bound with SO_REUSEPORT, and stop at the pipe's
    EOF (the parent is gone) as at SIGTERM. `config_path`: the file SIGHUP reads again (reload)."""
    from aiohttp import web

    from qinglong.shell.app import make_admin_app, make_app
    from qinglong.shell.db import Database
    from qinglong.shell.listener import BudgetedListener, ensure_fd_limit

    ensure_fd_limit(config)
    db = Database.of(config)
    await db.open()
    runners: list[web.AppRunner] = []
    running: list[BudgetedListener] = []
    loop = asyncio.get_running_loop()
    keyring = ql3w.Keyring(config.cluster_secret, config.accepted_secret)
    try:
        sites: list[tuple[str, web.Application, Listener]] = [
            ("worker", make_app("worker", db, keyring), config.worker),
            ("user", make_app("user", db), config.user),
        ]
        if parent is None:
            sites.append(("admin", make_admin_app(db), config.admin))
        contexts = _contexts(config)
        for name, app, listener in sites:
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            runners.append(runner)
            assert runner.server is not None
            budgeted = BudgetedListener(name, runner.server, listener.budget, contexts.get(name))
            running.append(budgeted)
            await budgeted.start(listener.host, listener.port, reuse_port=parent is not None)
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if config_path is not None:
            loop.add_signal_handler(signal.SIGHUP, _reload, config, config_path, keyring, running)
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


def _contexts(config: ShellConfig) -> dict[str, ssl.SSLContext]:
    """The worker (mTLS) and user listeners' TLS contexts, from the files the configuration names."""
    from qinglong.shell.tls import server_context

    out = {}
    for name, listener in (("worker", config.worker), ("user", config.user)):
        assert listener.certificate is not None and listener.key is not None
        client_ca = listener.client_ca if name == "worker" else None
        out[name] = server_context(listener.certificate, listener.key, client_ca=client_ca)
    return out


def _reload(config: ShellConfig, path: Path, keyring: ql3w.Keyring, running: list[BudgetedListener]) -> None:
    """SIGHUP: read the file again; all of the secrets and TLS files take effect, or none (logged why). New
    sessions are keyed with the new current secret, new connections get the new contexts; connections
    already open keep theirs. Anything else the file changes is logged and waits for a restart."""
    try:
        new = load(path)
        contexts = _contexts(new)
        keyring.load(new.cluster_secret, new.accepted_secret)
    except (ConfigError, OSError, ssl.SSLError, ValueError) as exc:
        emit(
            log,
            logging.ERROR,
            "shell.reload_failed",
            reason=str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
        )
        return
    for listener in running:
        if listener.name in contexts:
            listener.ssl_context = contexts[listener.name]
    ignored = [f for f in RESTART_ONLY if getattr(new, f) != getattr(config, f)]
    ignored += [
        name for name in ("worker", "user", "admin") if _address(getattr(new, name)) != _address(getattr(config, name))
    ]
    emit(log, logging.WARNING if ignored else logging.INFO, "shell.reloaded", key_id=keyring.current_id,
         accepted_key_id=keyring.accepted_id, restart_needed_for=",".join(ignored) or None)  # fmt: skip


def _address(listener: Listener) -> tuple[object, ...]:
    return (listener.host, listener.port, listener.budget)
