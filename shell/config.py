"""The shell's configuration file (TOML): listeners, certificate paths, the database DSN and the
cluster secret. Touches the files it is pointed at (read only).

    [database]
    dsn = "host=127.0.0.1 port=5432 user=ql_runtime dbname=qinglong"
    pool_size = 4

    [secret]
    cluster_secret_file = "/etc/qinglong/cluster.secret"   # ≥ 32 bytes; mode 0600

    [worker_listener]      # TLS 1.3, client certificate required
    host = "0.0.0.0"
    port = 8443
    certificate = "server.crt"
    key = "server.key"
    client_ca = "worker-ca.crt"

    [user_listener]        # TLS 1.3, bearer tokens
    host = "0.0.0.0"
    port = 9443
    certificate = "server.crt"
    key = "server.key"

    [admin_listener]       # plain HTTP /metrics and /healthz, loopback only
    host = "127.0.0.1"
    port = 9100

Relative paths are relative to the file. The file is read exactly: an unknown section or key, a
missing one or a wrong type is one line naming it (the wire contracts' field engine).
"""

from __future__ import annotations

import ipaddress
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path

from qinglong.wire.codec import WireError
from qinglong.wire.fields import Int, Nested, Record, Str, wire


class ConfigError(Exception):
    """A one-line reason the configuration cannot be used."""


@dataclass(frozen=True)
class Listener:
    host: str
    port: int
    certificate: Path | None = None
    key: Path | None = None
    client_ca: Path | None = None


@dataclass(frozen=True)
class ShellConfig:
    dsn: str
    pool_size: int
    cluster_secret: bytes
    worker: Listener
    user: Listener
    admin: Listener


PATH = Str(4096, min_len=1)  # a file, relative to the config file


class _Listener(Record):
    host: str = wire(Str(255, min_len=1), name="host")
    port: int = wire(Int(0, 65535), name="port")
    certificate: str | None = wire(PATH, name="certificate", optional=True, default=None)
    key: str | None = wire(PATH, name="key", optional=True, default=None)
    client_ca: str | None = wire(PATH, name="client_ca", optional=True, default=None)


class _Database(Record):
    dsn: str = wire(Str(4096, min_len=1), name="dsn")
    pool_size: int | None = wire(Int(1, 256), name="pool_size", optional=True, default=None)


class _Secret(Record):
    cluster_secret_file: str = wire(PATH, name="cluster_secret_file")


class _ShellFile(Record):
    """shell.toml exactly: unknown sections or keys, missing ones and wrong types are refused by the
    engine that parses wire messages."""

    database: _Database = wire(Nested(_Database), name="database")
    secret: _Secret = wire(Nested(_Secret), name="secret")
    worker_listener: _Listener = wire(Nested(_Listener), name="worker_listener")
    user_listener: _Listener = wire(Nested(_Listener), name="user_listener")
    admin_listener: _Listener | None = wire(Nested(_Listener), name="admin_listener", optional=True, default=None)


def _listener(given: _Listener, base: Path, name: str, needed: tuple[str, ...]) -> Listener:
    paths = {k: base / v for k in ("certificate", "key", "client_ca") if (v := getattr(given, k)) is not None}
    for key in needed:
        if key not in paths or not paths[key].is_file():
            raise ConfigError(f"[{name}] {key} is missing or not a file")
    return Listener(given.host, given.port, paths.get("certificate"), paths.get("key"), paths.get("client_ca"))


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def load(path: Path) -> ShellConfig:
    try:
        given = _ShellFile.load_at(tomllib.loads(path.read_text()), path.name)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    except WireError as exc:
        raise ConfigError(exc.message) from None
    base = path.parent
    secret_file = base / given.secret.cluster_secret_file
    try:
        secret = secret_file.read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"cannot read the cluster secret: {exc.strerror}") from None
    if len(secret) < 32:
        raise ConfigError("the cluster secret must hold at least 32 bytes")
    if secret_file.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{secret_file} must not be readable by group or others (chmod 600)")
    admin = given.admin_listener or _Listener(host="127.0.0.1", port=9100)
    if not _loopback(admin.host):
        raise ConfigError("[admin_listener] must bind a loopback address (127.0.0.1, ::1 or localhost)")
    return ShellConfig(
        dsn=given.database.dsn,
        pool_size=given.database.pool_size or 4,
        cluster_secret=secret,
        worker=_listener(given.worker_listener, base, "worker_listener", ("certificate", "key", "client_ca")),
        user=_listener(given.user_listener, base, "user_listener", ("certificate", "key")),
        admin=_listener(admin, base, "admin_listener", ()),
    )
