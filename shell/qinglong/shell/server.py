"""One shell process: the worker-ingress, user-API and admin listeners over one database pool until
SIGTERM/SIGINT, each within its connection budget (qinglong.shell.listener). SIGHUP reloads what a
rotation changes (the cluster secrets, certificates, keys and client CA bundles:
docs/decisions/0012-credential-rotation.md; the key-encryption keys of Project secrets) without dropping a
connection. With [secrets] in shell.toml it seals and opens secret values with one Sealer, reloaded in place, and
runs the rewrap pass (qinglong.shell.rewrap) at start and after each reload. As a child of a shell of several
processes (qinglong.shell.processes) it serves the worker and user listeners only. Touches the network (its
listeners), the process's RLIMIT_NOFILE and the database.

The shell's own modules are imported inside the functions: with `processes` > 1, PROMETHEUS_MULTIPROC_DIR
must be set before prometheus_client is first imported (it picks where metric values live at import).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from qinglong.shell.config import ConfigError, Listener, ShellConfig, load
from qinglong.wire import ql3w
from qinglong.wire.logline import emit

if TYPE_CHECKING:
    from aiohttp import web

    from qinglong.shell.listener import BudgetedListener
    from qinglong.shell.rewrap import Rewrapper
    from qinglong.shell.sealing import Sealer

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
    from qinglong.shell.rewrap import Rewrapper
    from qinglong.shell.sealing import Sealer

    ensure_fd_limit(config)
    db = Database.of(config)
    await db.open()
    runners: list[web.AppRunner] = []
    running: list[BudgetedListener] = []
    loop = asyncio.get_running_loop()
    keyring = ql3w.Keyring(config.cluster_secret, config.accepted_secret)
    sealer = Sealer(config.kek, config.accepted_keks) if config.kek is not None else None
    rewrapper = Rewrapper(db, sealer) if sealer is not None else None
    try:
        sites: list[tuple[str, web.Application, Listener]] = [
            ("worker", make_app("worker", db, keyring, sealer=sealer), config.worker),
            ("user", make_app("user", db, sealer=sealer), config.user),
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
            keys = _Keys(keyring, sealer, rewrapper)
            loop.add_signal_handler(signal.SIGHUP, _reload, config, config_path, keys, running)
        if parent is not None:
            loop.add_reader(parent, stop.set)  # readable only at EOF: the parent never writes
        if listeners is not None:
            listeners.update({b.name: b for b in running})
        if rewrapper is not None:
            rewrapper.start()
        if ready is not None:
            ready.set()
        await stop.wait()
    finally:
        if rewrapper is not None:
            await rewrapper.stop()
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


@dataclass(frozen=True)
class _Keys:
    """What a reload swaps in place: the ql3w keyring and, with [secrets], the Sealer (and its rewrap pass)."""

    keyring: ql3w.Keyring
    sealer: Sealer | None
    rewrapper: Rewrapper | None


def _reload(config: ShellConfig, path: Path, keys: _Keys, running: list[BudgetedListener]) -> None:
    """SIGHUP: read the file again; all of the secrets, key-encryption keys and TLS files take effect, or none
    (logged why). New sessions are keyed with the new current secret, new connections get the new contexts, the
    next secret is sealed (and rewrapped) under the new current key-encryption key; connections already open keep
    theirs. Adding or removing [secrets], and anything else the file changes, is logged and waits for a restart."""
    from qinglong.shell.sealing import Sealer

    try:
        new = load(path)
        contexts = _contexts(new)
        if keys.sealer is not None and new.kek is not None:
            Sealer(new.kek, new.accepted_keks)  # the keys are usable together before anything is swapped
        keys.keyring.load(new.cluster_secret, new.accepted_secret)
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
    if keys.sealer is not None and new.kek is not None:
        keys.sealer.load(new.kek, new.accepted_keks)
    if keys.rewrapper is not None:
        keys.rewrapper.start()
    ignored = [f for f in RESTART_ONLY if getattr(new, f) != getattr(config, f)]
    if (new.kek is None) != (keys.sealer is None):
        ignored.append("secrets")
    ignored += [
        name for name in ("worker", "user", "admin") if _address(getattr(new, name)) != _address(getattr(config, name))
    ]
    kek_ids: dict[str, Any] = {} if keys.sealer is None else {
        "kek_id": keys.sealer.current_id,
        "accepted_kek_ids": ",".join(sorted(keys.sealer.kek_ids - {keys.sealer.current_id})) or None,
    }  # fmt: skip
    emit(log, logging.WARNING if ignored else logging.INFO, "shell.reloaded", key_id=keys.keyring.current_id,
         accepted_key_id=keys.keyring.accepted_id, **kek_ids, restart_needed_for=",".join(ignored) or None)  # fmt: skip


def _address(listener: Listener) -> tuple[object, ...]:
    return (listener.host, listener.port, listener.budget)
