"""The shell's configuration file (TOML): listeners, certificate paths, connection budgets, the
database DSN, the cluster secret and the key-encryption keys of Project secrets. Touches the files it is
pointed at (read only).

    processes = 1                  # 1..64 shell processes on these ports (qinglong.shell.processes)

    [database]
    dsn = "host=127.0.0.1 port=5432 user=ql_runtime dbname=qinglong"
    pool_size = 4
    prepared_statements = true     # false behind a transaction pooler (pgbouncer pool_mode=transaction)

    [secret]
    cluster_secret_file = "/etc/qinglong/cluster.secret"   # ≥ 32 bytes; mode 0600; keys new sessions
    accepted_secret_file = "/etc/qinglong/cluster.secret.old"   # optional: also verified (a rotation)

    [secrets]              # optional: without it, no secret value is sealed or opened (secrets.unconfigured)
    kek_file = "/etc/qinglong/secrets.kek"   # 64 hex characters; mode 0600; seals every new value
    accepted_kek_files = ["/etc/qinglong/secrets.kek.old"]   # optional: also opened, rewrapped (a rotation)

    [worker_listener]      # TLS 1.3, client certificate required
    host = "0.0.0.0"
    port = 8443
    certificate = "server.crt"
    key = "server.key"
    client_ca = "worker-ca.crt"
    max_connections = 1024           # the connection budget (each key optional; defaults in BUDGETS)
    tls_handshake_timeout = 10.0     # seconds
    max_handshakes = 64              # TLS handshakes under way at once
    max_handshakes_per_source = 16   # of them from one IPv4 address or IPv6 /64
    header_timeout = 10.0
    body_timeout = 30.0
    idle_timeout = 75.0
    max_header_count = 32
    max_header_bytes = 16384

    [user_listener]        # TLS 1.3, bearer tokens
    host = "0.0.0.0"
    port = 9443
    certificate = "server.crt"
    key = "server.key"
    max_connections = 256

    [admin_listener]       # plain HTTP /metrics and /healthz, loopback only
    host = "127.0.0.1"
    port = 9100

Relative paths are relative to the file. The file is read exactly: an unknown section or key, a
missing one, a wrong type or a value out of range is one line naming it (the wire contracts' field
engine). Every listener has its own budget (docs/operations.md, "Connection budgets"); the admin
listener is plain HTTP, so it takes no tls_handshake_timeout, max_handshakes or max_handshakes_per_source.
`processes` > 1 needs fixed ports for the worker and user listeners (every process binds the same ones).

SIGHUP makes a running shell read the file again (qinglong.shell.server): the two secrets, the key-encryption
keys and the listeners' certificate, key and client CA files take effect for the next session, the next
connection and the next secret sealed or opened; adding or removing [secrets], and any other change, needs a
restart.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TypeVar

from qinglong.shell.sealing import KekFileError, read_kek
from qinglong.wire.codec import WireError
from qinglong.wire.fields import Bool, Int, List, Nested, Record, Seconds, Str, wire


class ConfigError(Exception):
    """A one-line reason the configuration cannot be used."""


@dataclass(frozen=True)
class Budget:
    """What one listener grants its connections (qinglong.shell.listener enforces it). Seconds are
    counted as docs/operations.md, "Connection budgets", says."""

    max_connections: int  # open at once, TLS handshakes included; the next one is closed at accept
    tls_handshake_timeout: float  # accept → TLS handshake done
    header_timeout: float  # handshake done (first request) or first byte (later ones) → complete head
    body_timeout: float  # complete head → complete body
    idle_timeout: float  # end of a response → first byte of the next request
    max_header_count: int  # header fields in one request head
    max_header_bytes: int  # one request head: request line, header fields and line ends
    max_handshakes: int = 64  # TLS handshakes under way at once; the next accepted connection waits its turn
    max_handshakes_per_source: int = 16  # of them from one source (IPv4 address, IPv6 /64); likewise


BUDGETS: Final = {  # the defaults, per listener section
    "worker_listener": Budget(1024, 10.0, 10.0, 30.0, 75.0, 32, 16384, 64, 16),
    "user_listener": Budget(256, 10.0, 10.0, 30.0, 30.0, 32, 16384, 32, 8),
    "admin_listener": Budget(16, 10.0, 10.0, 10.0, 30.0, 32, 8192),  # no TLS: the handshake budget is unused
}
BUDGET_KEYS: Final = tuple(f.name for f in dataclasses.fields(Budget))
TLS_ONLY: Final = ("tls_handshake_timeout", "max_handshakes", "max_handshakes_per_source")  # refused for admin


@dataclass(frozen=True)
class Listener:
    host: str
    port: int
    budget: Budget
    certificate: Path | None = None
    key: Path | None = None
    client_ca: Path | None = None


@dataclass(frozen=True)
class ShellConfig:
    dsn: str
    pool_size: int
    cluster_secret: bytes = field(repr=False)  # no secret or key bytes in a repr
    worker: Listener
    user: Listener
    admin: Listener
    prepared_statements: bool = True  # psycopg prepares what it ran 5 times on a connection (qinglong.shell.db)
    processes: int = 1  # > 1: a parent and that many children on the same ports (qinglong.shell.processes)
    # verified besides cluster_secret during a rotation (qinglong.wire.ql3w)
    accepted_secret: bytes | None = field(default=None, repr=False)
    # seals every new Project secret value (qinglong.shell.sealing); None: no [secrets] section
    kek: bytes | None = field(default=None, repr=False)
    # also open values, which the rewrap pass moves to `kek` (a rotation: qinglong.shell.rewrap)
    accepted_keks: tuple[bytes, ...] = field(default=(), repr=False)


PATH = Str(4096, min_len=1)  # a file, relative to the config file
ACCEPTED_KEKS_MAX: Final = 8  # key-encryption keys a shell opens besides the current one


class _Listener(Record):
    host: str = wire(Str(255, min_len=1), name="host")
    port: int = wire(Int(0, 65535), name="port")
    certificate: str | None = wire(PATH, name="certificate", optional=True, default=None)
    key: str | None = wire(PATH, name="key", optional=True, default=None)
    client_ca: str | None = wire(PATH, name="client_ca", optional=True, default=None)
    # The connection budget: an absent key takes its listener's default (BUDGETS).
    max_connections: int | None = wire(Int(1, 100_000), name="max_connections", optional=True, default=None)
    tls_handshake_timeout: float | None = wire(
        Seconds(0.1, 300), name="tls_handshake_timeout", optional=True, default=None
    )
    header_timeout: float | None = wire(Seconds(0.1, 300), name="header_timeout", optional=True, default=None)
    body_timeout: float | None = wire(Seconds(0.1, 3600), name="body_timeout", optional=True, default=None)
    idle_timeout: float | None = wire(Seconds(0.1, 3600), name="idle_timeout", optional=True, default=None)
    max_header_count: int | None = wire(Int(1, 1024), name="max_header_count", optional=True, default=None)
    max_header_bytes: int | None = wire(Int(1024, 1048576), name="max_header_bytes", optional=True, default=None)
    max_handshakes: int | None = wire(Int(1, 100_000), name="max_handshakes", optional=True, default=None)
    max_handshakes_per_source: int | None = wire(
        Int(1, 100_000), name="max_handshakes_per_source", optional=True, default=None
    )


class _Database(Record):
    dsn: str = wire(Str(4096, min_len=1), name="dsn")
    pool_size: int | None = wire(Int(1, 256), name="pool_size", optional=True, default=None)
    prepared_statements: bool | None = wire(Bool(), name="prepared_statements", optional=True, default=None)


class _Secret(Record):
    cluster_secret_file: str = wire(PATH, name="cluster_secret_file")
    accepted_secret_file: str | None = wire(PATH, name="accepted_secret_file", optional=True, default=None)


class _Secrets(Record):
    kek_file: str = wire(PATH, name="kek_file")
    accepted_kek_files: tuple[str, ...] | None = wire(
        List(PATH, max_items=ACCEPTED_KEKS_MAX), name="accepted_kek_files", optional=True, default=None
    )


class _ShellFile(Record):
    """shell.toml exactly: unknown sections or keys, missing ones and wrong types are refused by the
    engine that parses wire messages."""

    processes: int | None = wire(Int(1, 64), name="processes", optional=True, default=None)
    database: _Database = wire(Nested(_Database), name="database")
    secret: _Secret = wire(Nested(_Secret), name="secret")
    secrets: _Secrets | None = wire(Nested(_Secrets), name="secrets", optional=True, default=None)
    worker_listener: _Listener = wire(Nested(_Listener), name="worker_listener")
    user_listener: _Listener = wire(Nested(_Listener), name="user_listener")
    admin_listener: _Listener | None = wire(Nested(_Listener), name="admin_listener", optional=True, default=None)


def _listener(given: _Listener, base: Path, name: str, needed: tuple[str, ...]) -> Listener:
    paths = {k: base / v for k in ("certificate", "key", "client_ca") if (v := getattr(given, k)) is not None}
    for key in needed:
        if key not in paths or not paths[key].is_file():
            raise ConfigError(f"[{name}] {key} is missing or not a file")
    for key in TLS_ONLY if name == "admin_listener" else ():
        if getattr(given, key) is not None:
            raise ConfigError(f"[admin_listener] {key}: the admin listener is plain HTTP (no TLS)")
    defaults = BUDGETS[name]
    budget = Budget(
        **{k: getattr(defaults, k) if getattr(given, k) is None else getattr(given, k) for k in BUDGET_KEYS}
    )
    return Listener(given.host, given.port, budget, paths.get("certificate"), paths.get("key"), paths.get("client_ca"))


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _secret(path: Path) -> bytes:
    try:
        secret = path.read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"cannot read the cluster secret {path}: {exc.strerror}") from None
    if len(secret) < 32:
        raise ConfigError(f"the cluster secret {path} must hold at least 32 bytes")
    if path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{path} must not be readable by group or others (chmod 600)")
    return secret


def _keks(base: Path, given: _Secrets) -> tuple[bytes, tuple[bytes, ...]]:
    """The current key-encryption key and the accepted ones, each read from its file (qinglong.shell.sealing)."""
    try:
        current = read_kek(base / given.kek_file)
        accepted = tuple(read_kek(base / name) for name in given.accepted_kek_files or ())
    except KekFileError as exc:
        raise ConfigError(str(exc)) from None
    if len({current, *accepted}) != 1 + len(accepted):
        raise ConfigError("[secrets] accepted_kek_files holds the key of kek_file, or one key twice")
    return current, accepted


R = TypeVar("R", bound=Record)


def read(path: Path, shape: type[R]) -> R:
    """A TOML file parsed exactly into `shape` (ConfigError: one line naming what is wrong)."""
    try:
        return shape.load_at(tomllib.loads(path.read_text()), path.name)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    except WireError as exc:
        raise ConfigError(exc.message) from None


def load(path: Path) -> ShellConfig:
    given = read(path, _ShellFile)
    base = path.parent
    secret = _secret(base / given.secret.cluster_secret_file)
    accepted = None
    if given.secret.accepted_secret_file is not None:
        accepted = _secret(base / given.secret.accepted_secret_file)
        if accepted == secret:
            raise ConfigError("[secret] accepted_secret_file holds the current cluster secret")
    kek, accepted_keks = _keks(base, given.secrets) if given.secrets is not None else (None, ())
    admin = given.admin_listener or _Listener(host="127.0.0.1", port=9100)
    if not _loopback(admin.host):
        raise ConfigError("[admin_listener] must bind a loopback address (127.0.0.1, ::1 or localhost)")
    processes = given.processes or 1
    if processes > 1 and 0 in (given.worker_listener.port, given.user_listener.port):
        raise ConfigError("processes > 1 needs a fixed port (not 0) for the worker and user listeners")
    return ShellConfig(
        dsn=given.database.dsn,
        pool_size=given.database.pool_size or 4,
        prepared_statements=given.database.prepared_statements is not False,  # absent: true
        cluster_secret=secret,
        accepted_secret=accepted,
        kek=kek,
        accepted_keks=accepted_keks,
        worker=_listener(given.worker_listener, base, "worker_listener", ("certificate", "key", "client_ca")),
        user=_listener(given.user_listener, base, "user_listener", ("certificate", "key")),
        admin=_listener(admin, base, "admin_listener", ()),
        processes=processes,
    )
