"""`qinglong notify serve --config notify.toml`: the notification dispatcher, a process of its own that logs in as
ql_notify (which executes only ql_api.notify_claim_v1, notify_result_v1, notify_worker_scan_v1 and
notify_prune_v1). Touches the database through those four functions, its configuration and key files (read
only), the receivers' HTTP(S) endpoints, and the log.

    [database]
    dsn = "host=127.0.0.1 port=5432 user=ql_notify dbname=qinglong"

    [secrets]                                  # the shell's key-encryption keys (the same files)
    kek_file = "/etc/qinglong/secrets.kek"
    accepted_kek_files = ["/etc/qinglong/secrets.kek.old"]   # optional, during a rotation

    [dispatch]                                 # optional; every key optional
    batch = 16              # notifications claimed per call (1..100)
    concurrency = 8         # deliveries in flight (1..256)
    lease = 60.0            # seconds a claim holds a notification, then another may take it (>= 2 timeouts)
    timeout = 10.0          # seconds for one HTTP request, connect to last byte
    poll = 1.0              # seconds between claims while nothing is due
    scan = 15.0             # seconds between Worker offline scans
    prune = 300.0           # seconds between retention pages
    ca_file = "receivers-ca.pem"              # optional: trust this CA for https receivers (besides the system's)
    wecom_url = "https://qyapi.weixin.qq.com/cgi-bin/webhook/send"   # the WeCom robot endpoint
    loopback_receivers = false  # true: a receiver may be on this host (loopback) or link-local

Egress: a receiver is anyone's URL (a rule's author names it), so the dispatcher refuses one whose address, as
written or as resolved at delivery, is loopback, link-local (169.254.0.0/16 holds cloud metadata services),
unspecified or multicast (`egress.refused`): this host's own listeners, its database and a cloud's instance
credentials are not a notification's target. Private networks stay allowed (a receiver on the home LAN).
`loopback_receivers = true` lifts it (a receiver on the control host itself).

One loop: claim a page (SKIP LOCKED, a lease), deliver each item (at most `concurrency` at once), report each
attempt (ql_api.notify_result_v1: delivered, or pending again after a capped exponential backoff decided by
PostgreSQL, or dead), and claim again at once while pages come back full. Each item's secret arrives sealed and is
opened here with the same Sealer and key files as the shell (qinglong.shell.sealing); the value lives only in this
process's memory for the request (the HMAC key of a webhook, the key of a WeCom robot) and is never logged,
recorded or sent anywhere but to the receiver of a chat channel that needs it. Errors are stable codes, never a
message: an exception's text could quote a URL. Several dispatchers may run at once; SIGKILL loses nothing (the
lease brings the notification back), SIGTERM ends after the deliveries in flight, SIGHUP reloads the keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import signal
import socket
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import aiohttp
from yarl import URL

from qinglong.shell import notify_format
from qinglong.shell.config import PATH, ConfigError, _Database, _keks, _Secrets, read
from qinglong.shell.db import Database, StorageError
from qinglong.shell.routes import SealedSecret
from qinglong.shell.sealing import Sealed, Sealer, Unsealable
from qinglong.wire.codec import WireError
from qinglong.wire.fields import Bool, Int, Nested, Record, Seconds, Str, wire
from qinglong.wire.logline import configure as configure_logging
from qinglong.wire.logline import emit

log = logging.getLogger("qinglong.notify")

ANSWER_MAX: Final = 64 * 1024  # bytes of a receiver's answer read (WeCom's errcode); the rest is ignored
PRUNE_PAGE: Final = 1000
SCAN_PAGE: Final = 100
RETRY_S: Final = 5.0  # after the database could not serve


class _Dispatch(Record):
    batch: int | None = wire(Int(1, 100), name="batch", optional=True, default=None)
    concurrency: int | None = wire(Int(1, 256), name="concurrency", optional=True, default=None)
    lease: float | None = wire(Seconds(2, 3600), name="lease", optional=True, default=None)
    timeout: float | None = wire(Seconds(0.1, 600), name="timeout", optional=True, default=None)
    poll: float | None = wire(Seconds(0.05, 60), name="poll", optional=True, default=None)
    scan: float | None = wire(Seconds(0.1, 3600), name="scan", optional=True, default=None)
    prune: float | None = wire(Seconds(1, 86400), name="prune", optional=True, default=None)
    ca_file: str | None = wire(PATH, name="ca_file", optional=True, default=None)
    wecom_url: str | None = wire(Str(2048, min_len=10, pattern="https?://[!-~]+"), name="wecom_url", optional=True,
                                 default=None)  # fmt: skip
    loopback_receivers: bool | None = wire(Bool(), name="loopback_receivers", optional=True, default=None)


class _NotifyFile(Record):
    database: _Database = wire(Nested(_Database), name="database")
    secrets: _Secrets = wire(Nested(_Secrets), name="secrets")
    dispatch: _Dispatch | None = wire(Nested(_Dispatch), name="dispatch", optional=True, default=None)


@dataclass(frozen=True)
class NotifyConfig:
    dsn: str
    kek: bytes = field(repr=False)
    accepted_keks: tuple[bytes, ...] = field(default=(), repr=False)
    batch: int = 16
    concurrency: int = 8
    lease: float = 60.0
    timeout: float = 10.0
    poll: float = 1.0
    scan: float = 15.0
    prune: float = 300.0
    ca_file: Path | None = None
    wecom_url: str = notify_format.WECOM_URL
    loopback_receivers: bool = False


def load(path: Path) -> NotifyConfig:
    """notify.toml exactly (unknown keys, wrong types and values out of range are one line naming them)."""
    given = read(path, _NotifyFile)
    kek, accepted = _keks(path.parent, given.secrets)
    d = given.dispatch or _Dispatch()
    config = NotifyConfig(dsn=given.database.dsn, kek=kek, accepted_keks=accepted)
    named = ("batch", "concurrency", "lease", "timeout", "poll", "scan", "prune", "wecom_url", "loopback_receivers")
    overrides = {k: getattr(d, k) for k in named if getattr(d, k) is not None}
    if d.ca_file is not None:
        overrides["ca_file"] = path.parent / d.ca_file
        if not overrides["ca_file"].is_file():
            raise ConfigError("[dispatch] ca_file is missing or not a file")
    config = NotifyConfig(**{**config.__dict__, **overrides})
    if config.lease < 2 * config.timeout:
        raise ConfigError("[dispatch] lease must be at least twice timeout (a claim must outlive its request)")
    return config


def receivable(address: str, loopback: bool) -> bool:
    """Whether a receiver may have this IP address (see the module docstring, Egress)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_unspecified or ip.is_multicast:
        return False
    return loopback or not (ip.is_loopback or ip.is_link_local)


class EgressRefused(OSError):
    """A receiver's name resolved only to addresses it may not have."""


class _EgressResolver(aiohttp.abc.AbstractResolver):
    """aiohttp's default resolver, keeping only the addresses a receiver may have."""

    def __init__(self, loopback: bool) -> None:
        self._inner = aiohttp.DefaultResolver()
        self._loopback = loopback

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[aiohttp.abc.ResolveResult]:
        kept = [a for a in await self._inner.resolve(host, port, family) if receivable(a["host"], self._loopback)]
        if not kept:
            raise EgressRefused(f"{host} resolves to no address a receiver may have")
        return kept

    async def close(self) -> None:
        await self._inner.close()


@dataclass(frozen=True)
class Outcome:
    """One attempt's result as notify_result_v1 records it: ok, the HTTP status, a stable error code."""

    ok: bool
    status_code: int | None = None
    error: str | None = None


class Dispatcher:
    """Claims, delivers and reports until stopped (`stop`)."""

    def __init__(self, config: NotifyConfig, db: Database, sealer: Sealer) -> None:
        self.config, self.db, self.sealer = config, db, sealer
        self._stopping = asyncio.Event()
        self._slots = asyncio.Semaphore(config.concurrency)
        self.delivered = 0

    def stop(self) -> None:
        self._stopping.set()

    def session(self) -> aiohttp.ClientSession:
        """The HTTP client of the deliveries: the CA file's and the system's trust, `concurrency` connections, the
        request timeout, the egress rule on every name it resolves, no proxy from the environment."""
        context = ssl.create_default_context(cafile=str(self.config.ca_file) if self.config.ca_file else None)
        if self.config.ca_file is not None:
            context.load_default_certs()
        connector = aiohttp.TCPConnector(
            ssl=context, limit=self.config.concurrency, resolver=_EgressResolver(self.config.loopback_receivers)
        )
        timeout = aiohttp.ClientTimeout(total=self.config.timeout)
        return aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=False)

    async def run(self) -> None:
        async with self.session() as http:
            next_scan = next_prune = 0.0
            while not self._stopping.is_set():
                try:
                    now = time.monotonic()
                    if now >= next_scan:
                        await self.db.call("notify_worker_scan_v1", {"p_limit": SCAN_PAGE})
                        next_scan = now + self.config.scan
                    if now >= next_prune:
                        await self.db.call("notify_prune_v1", {"p_limit": PRUNE_PAGE})
                        next_prune = now + self.config.prune
                    full = await self.page(http)
                except StorageError as exc:
                    emit(log, logging.WARNING, "notify.database_unavailable", key="notify.db", sqlstate=exc.sqlstate,
                         error=exc.error)  # fmt: skip
                    await self._sleep(RETRY_S)
                    continue
                if not full:
                    await self._sleep(self.config.poll)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def page(self, http: aiohttp.ClientSession) -> bool:
        """Claim one page and deliver it; True when the page was full (more may be due)."""
        answer = await self.db.call(
            "notify_claim_v1", {"p_limit": self.config.batch, "p_lease_ms": int(self.config.lease * 1000)}
        )
        if answer.get("status") != "claimed":
            raise RuntimeError(f"notify_claim_v1 answered {answer.get('status')!r} {answer.get('reason')!r}")
        items: list[dict[str, Any]] = answer["items"]
        await asyncio.gather(*(self._one(http, item) for item in items))
        return len(items) == self.config.batch

    async def _one(self, http: aiohttp.ClientSession, item: Mapping[str, Any]) -> None:
        async with self._slots:
            started = time.monotonic()
            outcome = await self.deliver(http, item)
            duration_ms = min(int((time.monotonic() - started) * 1000), 3_600_000)
        answer = await self.db.call(
            "notify_result_v1",
            {"p_outbox_id": item["id"], "p_attempt_no": item["attemptNo"], "p_ok": outcome.ok,
             "p_status_code": outcome.status_code, "p_error": outcome.error, "p_duration_ms": duration_ms},
        )  # fmt: skip
        if answer.get("status") == "delivered":
            self.delivered += 1
        emit(
            log,
            logging.INFO if outcome.ok else logging.WARNING,
            "notify.attempt",
            id=item["id"],
            attempt=item["attemptNo"],
            kind=item.get("kind"),
            rule=item.get("rule"),
            channel=item.get("channel"),
            statusCode=outcome.status_code,
            error=outcome.error,
            ms=duration_ms,
            result=answer.get("status"),
            nextAttemptAtMs=answer.get("nextAttemptAtMs"),
        )

    def key_of(self, item: Mapping[str, Any]) -> bytes | str:
        """The opened secret, or an error code (secret.unavailable, secret.unknown_kek, secret.tampered)."""
        if item.get("secret") is None:
            return "secret.unavailable"
        try:
            s = SealedSecret.from_obj(item["secret"])
        except WireError:
            return "secret.malformed"
        sealed = Sealed(s.kek_id, s.wrapped_key, s.nonce, s.ciphertext)
        try:
            return self.sealer.open(sealed, project_id=str(item["projectId"]), name=s.name, version_id=s.version_id)
        except Unsealable as exc:
            return f"secret.{exc.reason}"

    async def deliver(self, http: aiohttp.ClientSession, item: Mapping[str, Any]) -> Outcome:
        """One attempt: build the channel's request with the opened key, send it, judge the answer."""
        key = self.key_of(item)
        if isinstance(key, str):
            return Outcome(False, error=key)
        try:
            if item.get("channel") == "wecom":
                request = notify_format.wecom(item, key, endpoint=self.config.wecom_url)
            else:
                request = notify_format.webhook(item, key)
        except ValueError:
            return Outcome(False, error="secret.not_a_key")
        finally:
            del key
        host = URL(request.url).host or ""
        try:
            if not receivable(host, self.config.loopback_receivers):
                return Outcome(False, error="egress.refused")
        except ValueError:
            pass  # a name: the connector's resolver judges its addresses
        try:
            async with http.post(request.url, data=request.body, headers=dict(request.headers),
                                 allow_redirects=False) as response:  # fmt: skip
                answer = await response.content.read(ANSWER_MAX)
                status = response.status
        except TimeoutError:
            return Outcome(False, error="timeout")
        except aiohttp.ClientConnectorCertificateError:
            return Outcome(False, error="tls.certificate")
        except aiohttp.ClientConnectorError as failed:
            return Outcome(False, error="egress.refused" if isinstance(failed.os_error, EgressRefused) else "connect")
        except aiohttp.ClientError:
            return Outcome(False, error="http.client")
        if not 200 <= status < 300:
            return Outcome(False, status_code=status, error="http.status")
        if item.get("channel") == "wecom":
            failure = notify_format.wecom_failure(answer)
            if failure is not None:
                return Outcome(False, status_code=status, error=failure)
        return Outcome(True, status_code=status)


async def serve(config: NotifyConfig, config_path: Path | None = None) -> None:
    """Dispatch until SIGTERM or SIGINT (after the deliveries in flight); SIGHUP reloads the key files."""
    sealer = Sealer(config.kek, config.accepted_keks)
    db = Database(config.dsn, max_size=min(4, config.concurrency + 1), application_name="qinglong-notify")
    await db.open()
    dispatcher = Dispatcher(config, db, sealer)
    loop = asyncio.get_running_loop()

    def reload() -> None:
        if config_path is None:
            return
        try:
            fresh = load(config_path)
            sealer.load(fresh.kek, fresh.accepted_keks)
            emit(log, logging.INFO, "notify.reloaded", kek=sealer.current_id)
        except (ConfigError, ValueError) as exc:
            emit(log, logging.ERROR, "notify.reload_failed", reason=str(exc))

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, dispatcher.stop)
    loop.add_signal_handler(signal.SIGHUP, reload)
    emit(log, logging.INFO, "notify.started", kek=sealer.current_id, batch=config.batch,
         concurrency=config.concurrency)  # fmt: skip
    try:
        await dispatcher.run()
    finally:
        await db.close()
        emit(log, logging.INFO, "notify.stopped", delivered=dispatcher.delivered)


def main(config_path: Path) -> int:
    """`qinglong notify serve`: 0 after SIGTERM/SIGINT; ConfigError when it cannot start."""
    configure_logging()
    asyncio.run(serve(load(config_path), config_path))
    return 0
