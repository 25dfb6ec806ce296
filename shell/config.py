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

Relative paths are relative to the file.
"""

from __future__ import annotations

import ipaddress
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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


def _listener(section: dict[str, Any], base: Path, name: str, *, tls: bool, mtls: bool = False) -> Listener:
    try:
        host, port = str(section["host"]), int(section["port"])
        paths = {k: base / str(section[k]) for k in ("certificate", "key", "client_ca") if k in section}
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"[{name}] needs host and port ({exc})") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"[{name}] port {port} is out of range")
    needed = ("certificate", "key", "client_ca") if mtls else ("certificate", "key") if tls else ()
    for key in needed:
        if key not in paths or not paths[key].is_file():
            raise ConfigError(f"[{name}] {key} is missing or not a file")
    return Listener(host, port, paths.get("certificate"), paths.get("key"), paths.get("client_ca"))


def load(path: Path) -> ShellConfig:
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    base = path.parent
    try:
        dsn = str(raw["database"]["dsn"])
        pool_size = int(raw["database"].get("pool_size", 4))
        secret_file = base / str(raw["secret"]["cluster_secret_file"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"missing setting {exc}") from None
    try:
        secret = secret_file.read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"cannot read the cluster secret: {exc.strerror}") from None
    if len(secret) < 32:
        raise ConfigError("the cluster secret must hold at least 32 bytes")
    if secret_file.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{secret_file} must not be readable by group or others (chmod 600)")
    admin = _listener(raw.get("admin_listener", {"host": "127.0.0.1", "port": 9100}), base, "admin_listener", tls=False)
    if not ipaddress.ip_address(admin.host).is_loopback:
        raise ConfigError("[admin_listener] must bind a loopback address")
    return ShellConfig(
        dsn=dsn,
        pool_size=max(1, pool_size),
        cluster_secret=secret,
        worker=_listener(raw.get("worker_listener", {}), base, "worker_listener", tls=True, mtls=True),
        user=_listener(raw.get("user_listener", {}), base, "user_listener", tls=True),
        admin=admin,
    )
