"""A throw-away Patroni cluster on one machine, for the failover test and benchmark; touches only its root.

`PatroniCluster(root)` starts one etcd (Debian's `etcd-server` binary, its data in ``root/etcd``, loopback
ports) and three Patroni processes (Debian's `patroni`), each with its own PostgreSQL data folder
``root/node<i>/data``, its configuration ``root/node<i>/patroni.yml`` and its log ``root/node<i>/patroni.log``.
Patroni's DCS timing is short (ttl 10, loop_wait 1, retry_timeout 5) and `primary_start_timeout` is 0, so a
crashed primary is failed over at once instead of restarted in place; `synchronous_mode` is on, so Patroni
promotes only the synchronous standby and a COMMIT is acknowledged once that standby flushed it. Every node
preloads pg_cron for `database` (its scheduler starts only once its node is promoted) with
`cron.use_background_workers` on, so a job runs inside the server that scheduled it. Local connections are
trusted: development only, never data anyone cares about.

Running as root, Patroni (hence initdb and postgres) runs as the `postgres` OS user through setpriv, as
`qinglong.devdb.Cluster` does; `root` must sit under folders that user can traverse (e.g.
``tempfile.mkdtemp(dir="/tmp")`` chmodded 0755). Besides files under `root` it starts etcd and the Patroni
processes (which start postgres), and signals them and the postmasters; nothing else.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qinglong.devdb.cluster import _OS_USER, _as_user, _binaries, _child_env, _free_port, _os_user

__all__ = ["Member", "PatroniCluster", "PatroniError"]

_SCOPE = "qinglong"


class PatroniError(RuntimeError):
    """The Patroni cluster could not be started or did not reach the state waited for."""


@dataclass(frozen=True)
class Member:
    """One node as Patroni's REST API reports it (`GET /cluster`)."""

    name: str
    role: str  # leader | sync_standby | replica
    state: str  # running | streaming | starting | stopped | …
    port: int
    timeline: int | None
    lag: int | None


def _stop(proc: subprocess.Popen[bytes], timeout: float) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class PatroniCluster:
    """One etcd and `nodes` Patroni-managed PostgreSQL servers under `root` (see the module's text)."""

    def __init__(self, root: Path, database: str = "qinglong", nodes: int = 3) -> None:
        self.root = root
        self.database = database
        self.names = [f"node{i}" for i in range(nodes)]
        self.pg_ports = [_free_port("127.0.0.1") for _ in self.names]
        self.rest_ports = [_free_port("127.0.0.1") for _ in self.names]
        self.etcd_port, self.etcd_peer_port = _free_port("127.0.0.1"), _free_port("127.0.0.1")
        self._user = _os_user() if os.geteuid() == 0 else None
        self._etcd: subprocess.Popen[bytes] | None = None
        self._patroni: dict[str, subprocess.Popen[bytes]] = {}

    # -- addresses --

    def dsn(self, dbname: str | None = None, user: str = "postgres") -> str:
        """The multi-host DSN clients use: every node, and only a read-write session is accepted."""
        hosts = ",".join("127.0.0.1" for _ in self.names)
        ports = ",".join(map(str, self.pg_ports))
        return (
            f"host={hosts} port={ports} user={user} dbname={dbname or self.database} "
            "target_session_attrs=read-write connect_timeout=2"
        )

    def node_dsn(self, name: str, dbname: str | None = None, user: str = "postgres") -> str:
        port = self.pg_ports[self.names.index(name)]
        return f"host=127.0.0.1 port={port} user={user} dbname={dbname or self.database} connect_timeout=2"

    def sqitch_target(self, name: str) -> str:
        return f"db:pg://postgres@127.0.0.1:{self.pg_ports[self.names.index(name)]}/{self.database}"

    def data_dir(self, name: str) -> Path:
        return self.root / name / "data"

    def log_file(self, name: str) -> Path:
        return self.root / name / "patroni.log"

    # -- life --

    def start(self, timeout: float = 120.0) -> None:
        """etcd, then every Patroni; returns once a leader and every replica stream (one synchronously)."""
        self.root.mkdir(mode=0o755, parents=True, exist_ok=True)
        self._start_etcd()
        for i, name in enumerate(self.names):
            self._start_patroni(i, name)
        self.wait_healthy(timeout)

    def stop(self) -> None:
        """Every Patroni (it stops its postgres), then etcd; idempotent."""
        for proc in self._patroni.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self._patroni.values():
            _stop(proc, 15.0)
        self._patroni.clear()
        for name in self.names:  # a postmaster whose Patroni did not stop it: SIGQUIT, then SIGKILL
            pid = self.postmaster_pid(name)
            if pid is None or not _alive(pid) or str(self.data_dir(name)).encode() not in _cmdline(pid):
                continue  # gone, or a stale postmaster.pid naming another process now
            for signum in (signal.SIGQUIT, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signum)
                deadline = time.monotonic() + 10
                while _alive(pid) and time.monotonic() < deadline:
                    time.sleep(0.1)
        if self._etcd is not None:
            _stop(self._etcd, 10.0)
            self._etcd = None

    def __enter__(self) -> PatroniCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start_etcd(self) -> None:
        data = self.root / "etcd"
        client, peer = f"http://127.0.0.1:{self.etcd_port}", f"http://127.0.0.1:{self.etcd_peer_port}"
        command = ["etcd", "--name", "ql", "--data-dir", str(data), "--listen-client-urls", client]
        command += ["--advertise-client-urls", client, "--listen-peer-urls", peer]
        command += ["--initial-advertise-peer-urls", peer, "--initial-cluster", f"ql={peer}"]
        command += ["--initial-cluster-state", "new", "--log-level", "warn"]
        with (self.root / "etcd.log").open("ab") as log:
            self._etcd = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            with (
                contextlib.suppress(OSError, ValueError),
                urllib.request.urlopen(f"{client}/health", timeout=1) as resp,  # noqa: S310 - loopback http
            ):
                if json.loads(resp.read()).get("health") == "true":
                    return
            if self._etcd.poll() is not None or time.monotonic() > deadline:
                raise PatroniError(f"etcd did not become healthy; see {self.root / 'etcd.log'}")
            time.sleep(0.1)

    def _config(self, i: int, name: str) -> dict[str, Any]:
        folder = self.root / name
        return {
            "scope": _SCOPE,
            "name": name,
            "restapi": {
                "listen": f"127.0.0.1:{self.rest_ports[i]}",
                "connect_address": f"127.0.0.1:{self.rest_ports[i]}",
            },
            "etcd3": {"hosts": f"127.0.0.1:{self.etcd_port}"},
            "bootstrap": {
                "dcs": {
                    "ttl": 10,
                    "loop_wait": 1,
                    "retry_timeout": 5,
                    "primary_start_timeout": 0,
                    "maximum_lag_on_failover": 1048576,
                    "synchronous_mode": True,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "remove_data_directory_on_rewind_failure": True,
                        "remove_data_directory_on_diverged_timelines": True,
                        "parameters": {
                            "max_connections": 200,
                            "wal_log_hints": "on",
                            "shared_preload_libraries": "pg_cron",
                            "cron.database_name": self.database,
                            # A job runs in a background worker of the server whose scheduler started it (the
                            # primary), not over libpq to the host:port cron.job recorded at scheduling time:
                            # the nodes of this machine listen on different ports.
                            "cron.use_background_workers": "on",
                            "max_worker_processes": 16,
                            "wal_keep_size": "256MB",
                            "log_timezone": "UTC",  # tests/support/chaos/failover.py reads job starts from the logs
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C.UTF-8"}, "data-checksums"],
                "pg_hba": [
                    "local all all trust",
                    "host all all 127.0.0.1/32 trust",
                    "host replication all 127.0.0.1/32 trust",
                ],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{self.pg_ports[i]}",
                "connect_address": f"127.0.0.1:{self.pg_ports[i]}",
                "data_dir": str(folder / "data"),
                "bin_dir": str(_binaries().bindir),
                "pgpass": str(folder / "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres", "password": "unused-trust"},
                    "replication": {"username": "replicator", "password": "unused-trust"},
                    "rewind": {"username": "postgres", "password": "unused-trust"},
                },
                "parameters": {"unix_socket_directories": str(folder)},
            },
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False, "nosync": False},
        }

    def _start_patroni(self, i: int, name: str) -> None:
        folder = self.root / name
        folder.mkdir(mode=0o755, exist_ok=True)
        config = folder / "patroni.yml"
        config.write_text(json.dumps(self._config(i, name), indent=1))  # JSON is YAML
        if self._user is not None:
            for path in (folder, config):
                shutil.chown(path, _OS_USER, _OS_USER)
        with self.log_file(name).open("ab") as log:
            self._patroni[name] = subprocess.Popen(
                _as_user(["patroni", str(config)], self._user),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=folder,
                env=_child_env(self._user),
                start_new_session=True,
            )

    # -- state --

    def members(self) -> list[Member]:
        """The cluster as the first answering node's REST API sees it ([] when none answers)."""
        for port in self.rest_ports:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/cluster", timeout=1) as resp:
                    data = json.loads(resp.read())
            except (OSError, ValueError):
                continue
            return [
                Member(m["name"], m["role"], m["state"], int(m["port"]), m.get("timeline"), _lag(m.get("lag")))
                for m in data.get("members", [])
            ]
        return []

    def leader(self) -> Member | None:
        found = [m for m in self.members() if m.role == "leader" and m.state == "running"]
        return found[0] if len(found) == 1 else None

    def healthy(self) -> bool:
        """One running leader; every other node streaming from it, one of them the synchronous standby."""
        members = self.members()
        if len(members) != len(self.names):
            return False
        leaders = [m for m in members if m.role == "leader" and m.state == "running"]
        others = [m for m in members if m.role != "leader"]
        return (
            len(leaders) == 1
            and all(m.state in ("running", "streaming") and m.lag is not None for m in others)
            and any(m.role == "sync_standby" for m in others)
            and self._sync_on_leader(leaders[0].name)
        )

    def _sync_on_leader(self, name: str) -> bool:
        """The leader itself reports a synchronous standby (pg_stat_replication), not only the DCS."""
        try:
            out = subprocess.run(
                [str(_binaries().bindir / "psql"), "-XAtq", "-d", self.node_dsn(name, "postgres"), "-c",
                 "select count(*) from pg_stat_replication where sync_state = 'sync' and state = 'streaming'"],
                capture_output=True, text=True, timeout=5, check=False, env=_child_env(self._user),
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return False
        return out.returncode == 0 and out.stdout.strip() == "1"

    def wait_healthy(self, timeout: float = 120.0) -> Member:
        deadline = time.monotonic() + timeout
        while True:
            if self.healthy():
                leader = self.leader()
                if leader is not None:
                    return leader
            if time.monotonic() > deadline:
                raise PatroniError(
                    f"no healthy cluster within {timeout:.0f} s: {self.members()}; logs under {self.root}"
                )
            time.sleep(0.2)

    def postmaster_pid(self, name: str) -> int | None:
        try:
            return int((self.data_dir(name) / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def kill_leader_postmaster(self) -> str:
        """SIGKILL the leader's postmaster (its backends lose their parent and exit); the leader's name."""
        leader = self.leader()
        if leader is None:
            raise PatroniError(f"no leader to kill: {self.members()}")
        pid = self.postmaster_pid(leader.name)
        if pid is None:
            raise PatroniError(f"no postmaster.pid for the leader {leader.name}")
        os.kill(pid, signal.SIGKILL)
        return leader.name


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _lag(value: object) -> int | None:
    if isinstance(value, int):
        return value
    return None
