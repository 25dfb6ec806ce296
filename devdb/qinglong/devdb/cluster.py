"""A throw-away PostgreSQL cluster (the installed major) for tests, demo and benchmarks; touches only its root.

`Cluster(root)` runs `initdb` into ``root/data`` (once), writes its settings to
``root/data/devdb.conf`` (included from postgresql.conf), starts `postgres` with its output
in ``root/postgres.log`` and a Unix socket in ``root/sock``, and stops it again. The server
listens on 127.0.0.1 only and trusts every local connection: it is for development, never
for data anyone cares about.

Besides files under `root` it starts processes (initdb, postgres, pg_isready) and signals the
postmaster it started; nothing else. It needs only the standard library.

Running as root: `initdb` and `postgres` refuse to run as root, so they are run as the
`postgres` OS user through ``setpriv --reuid=postgres --regid=postgres --init-groups``.
setpriv execs without forking, so the pid of the Popen is the postmaster and signals reach
it. `root` (and its `sock` folder and log) are chowned to `postgres`, and every folder above
`root` must be traversable by that user: a root inside a 0700 folder (pytest's `tmp_path`
lives under one, /tmp/pytest-of-root) fails with a `ClusterError` saying so. Use e.g.
``tempfile.mkdtemp(dir="/tmp")`` and chmod it 0755.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import functools
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any
from urllib.parse import quote

__all__ = ["Cluster", "ClusterError", "server_bindir"]

_DEBIAN_SERVERS = Path("/usr/lib/postgresql")  # one <major>/bin and <major>/lib per installed server
_OS_USER = "postgres"
_CONF_NAME = "devdb.conf"
_INCLUDE_LINE = f"include_if_exists = '{_CONF_NAME}'\t# added by qinglong.devdb"

_START_TIMEOUT = 60.0
_STOP_TIMEOUT = 30.0
_QUIT_TIMEOUT = 10.0
_PORT_ATTEMPTS = 5
_LOG_TAIL_LINES = 20
# sun_path is 108 bytes on Linux; "/.s.PGSQL.65535" plus the terminating NUL must fit too.
_MAX_SOCKET_DIR = 108 - len("/.s.PGSQL.65535") - 1


class ClusterError(RuntimeError):
    """The cluster could not be set up, started or stopped.

    `summary` is one line; `str()` adds the last lines of the server log when there is one.
    """

    def __init__(self, summary: str, *, log_file: Path | None = None) -> None:
        self.summary = summary
        self.log_file = log_file
        self.log_tail = _tail(log_file, _LOG_TAIL_LINES) if log_file is not None else ""
        message = summary
        if self.log_tail:
            message += f"\n--- last {_LOG_TAIL_LINES} lines of {log_file}:\n{self.log_tail}"
        super().__init__(message)


@dataclass(frozen=True)
class _Binaries:
    bindir: Path
    pkglibdir: Path

    def tool(self, name: str) -> str:
        return str(self.bindir / name)


@dataclass(frozen=True)
class _OsUser:
    uid: int
    gid: int
    groups: frozenset[int]
    home: str


class Cluster:
    """One PostgreSQL cluster under `root`; see the module docstring.

    `fsync=False` also turns off synchronous_commit and full_page_writes and skips initdb's
    sync (-N): fast, and unsafe against an OS crash. With `preload_cron` (and pg_cron.so
    installed) pg_cron's launcher runs in `cron_database`; until that database exists the
    launcher logs a FATAL and is restarted every second, which is harmless. `settings` are
    written last, so they override everything but the port (pass `port=` for that). With
    `port=None` a free port is chosen now and another one if it is taken at start. `server_env` is added to
    the environment of the server alone (not of initdb or the tools), after the switch to its user: e.g.
    libfaketime's LD_PRELOAD for a database clock moved ahead.
    """

    host: str = "127.0.0.1"
    superuser: str = "postgres"

    def __init__(
        self,
        root: Path,
        *,
        fsync: bool = True,
        port: int | None = None,
        preload_cron: bool = True,
        cron_database: str = "postgres",
        settings: Mapping[str, str] | None = None,
        server_env: Mapping[str, str] | None = None,
    ) -> None:
        self.root = Path(root).absolute()
        self.data_dir = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.log_file = self.root / "postgres.log"
        self.fsync = fsync
        self.preload_cron = preload_cron
        self.cron_database = cron_database
        self.settings: dict[str, str] = dict(settings or {})
        self.server_env: dict[str, str] = dict(server_env or {})
        if "port" in self.settings:
            raise ValueError("pass the port as Cluster(port=...), not in settings")
        if port is not None and not 0 < port < 65536:
            raise ValueError(f"port {port} is not in 1..65535")
        self._auto_port = port is None
        self.port: int = _free_port(self.host) if port is None else port
        self._proc: subprocess.Popen[bytes] | None = None
        self._owner_pid = 0  # the process that started the server (atexit runs in forks too)

    # -- public API ---------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The postmaster's pid while it runs (as far as this object knows), else None."""
        if self._proc is None or self._proc.poll() is not None:
            return None
        return self._proc.pid

    @property
    def running(self) -> bool:
        return self.pid is not None

    def dsn(self, dbname: str = "postgres") -> str:
        """A libpq key=value connection string."""
        parts = {"host": self.host, "port": str(self.port), "user": self.superuser}
        parts["dbname"] = dbname
        return " ".join(f"{key}={_dsn_value(value)}" for key, value in parts.items())

    def sqitch_target(self, dbname: str) -> str:
        """A Sqitch target URI for `dbname`."""
        return f"db:pg://{self.superuser}@{self.host}:{self.port}/{quote(dbname, safe='')}"

    def env(self, dbname: str = "postgres") -> dict[str, str]:
        """libpq variables for child processes (psql, pg_prove, sqitch)."""
        return {
            "PGHOST": self.host,
            "PGPORT": str(self.port),
            "PGUSER": self.superuser,
            "PGDATABASE": dbname,
        }

    def start(self) -> None:
        """initdb if needed, start the server and wait until it accepts connections.

        Does nothing when this object's server is already running.
        """
        if self.running:
            return
        binaries = _binaries()
        user = _os_user() if os.geteuid() == 0 else None
        self._prepare_root(user)
        if not (self.data_dir / "PG_VERSION").is_file():
            self._initdb(binaries, user)
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            self._write_settings(binaries, user)
            clash = self._start_once(binaries, user)
            if not clash:
                return
            if not self._auto_port or attempt == _PORT_ATTEMPTS:
                raise ClusterError(
                    f"port {self.port} on {self.host} is in use (tried {attempt} port{'s' if attempt > 1 else ''})",
                    log_file=self.log_file,
                )
            self.port = _free_port(self.host)

    def stop(self) -> None:
        """Fast shutdown: SIGINT, then SIGQUIT after 30 s, then SIGKILL; idempotent."""
        proc = self._proc
        if proc is not None:
            # Forget the process only once it is gone: a stop() cut short (say by an
            # exception from a signal handler) is finished by the next stop() or at exit.
            _shutdown(proc)
            self._proc = None
        atexit.unregister(self._stop_at_exit)

    def __enter__(self) -> Cluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.running else "stopped"
        return f"Cluster({str(self.root)!r}, port={self.port}, {state})"

    # -- start-up steps -----------------------------------------------------------------------

    def _prepare_root(self, user: _OsUser | None) -> None:
        if len(str(self.socket_dir)) > _MAX_SOCKET_DIR:
            raise ClusterError(
                f"socket folder {self.socket_dir} is too long for a Unix socket path "
                f"(at most {_MAX_SOCKET_DIR} characters); use a shorter root"
            )
        self.root.mkdir(mode=0o755, parents=True, exist_ok=True)
        self.socket_dir.mkdir(mode=0o755, exist_ok=True)
        self.log_file.touch(mode=0o644, exist_ok=True)
        if user is None:
            return
        for path in (self.root, self.socket_dir, self.log_file):
            st = path.stat()
            if st.st_uid != user.uid or st.st_gid != user.gid:
                os.chown(path, user.uid, user.gid)
        for parent in self.root.parents:
            if not _traversable(parent, user):
                mode = stat.S_IMODE(parent.stat().st_mode)
                raise ClusterError(
                    f"the {_OS_USER} OS user cannot traverse {parent} (mode {mode:04o}), "
                    f"a parent of the cluster root {self.root}; put the root under a folder "
                    f"with mode 0755 or 0711 (e.g. tempfile.mkdtemp(dir='/tmp'), chmod 0755)"
                )

    def _initdb(self, binaries: _Binaries, user: _OsUser | None) -> None:
        base = [binaries.tool("initdb"), "-D", str(self.data_dir), "-A", "trust"]
        base += ["-U", self.superuser, "--encoding=UTF8"]
        if not self.fsync:
            base.append("-N")
        for locale in ("--locale=C.UTF-8", "--no-locale"):
            command = [*base, locale]
            with self._log(f"initdb: {' '.join(command)}") as log:
                result = subprocess.run(**self._child(command, user, log), check=False)
            if result.returncode == 0:
                return
        raise ClusterError(
            f"initdb into {self.data_dir} failed (exit code {result.returncode})",
            log_file=self.log_file,
        )

    def _write_settings(self, binaries: _Binaries, user: _OsUser | None) -> None:
        values: dict[str, str] = {
            "port": str(self.port),
            "listen_addresses": self.host,
            "unix_socket_directories": str(self.socket_dir),
            "max_connections": "200",
            "log_destination": "stderr",
            "logging_collector": "off",
            "fsync": "on" if self.fsync else "off",
        }
        if not self.fsync:
            values["synchronous_commit"] = "off"
            values["full_page_writes"] = "off"
        if self.preload_cron and (binaries.pkglibdir / "pg_cron.so").is_file():
            values["shared_preload_libraries"] = "pg_cron"
            values["cron.database_name"] = self.cron_database
        values.update(self.settings)
        lines = ["# Written by qinglong.devdb on every start; edits are overwritten."]
        lines += [f"{key} = {_conf_value(value)}" for key, value in values.items()]
        conf = self.data_dir / _CONF_NAME
        conf.write_text("\n".join(lines) + "\n", encoding="utf-8")
        main_conf = self.data_dir / "postgresql.conf"
        text = main_conf.read_text(encoding="utf-8")
        if _INCLUDE_LINE not in text:
            with main_conf.open("a", encoding="utf-8") as f:
                f.write(("" if text.endswith("\n") else "\n") + _INCLUDE_LINE + "\n")
        if user is not None:
            os.chown(conf, user.uid, user.gid)

    def _start_once(self, binaries: _Binaries, user: _OsUser | None) -> bool:
        """Start the postmaster and wait for it; True when it failed for a port clash."""
        log_offset = self.log_file.stat().st_size
        command = [binaries.tool("postgres"), "-D", str(self.data_dir)]
        if self.server_env:  # `env` execs the server (same pid), so only the server's own process has them
            command = ["env", *(f"{key}={value}" for key, value in self.server_env.items()), *command]
        self._owner_pid = os.getpid()
        atexit.register(self._stop_at_exit)
        with self._log(f"start: {' '.join(command)} (port {self.port})") as log:
            self._proc = subprocess.Popen(**self._child(command, user, log), start_new_session=True)
        proc = self._proc
        deadline = time.monotonic() + _START_TIMEOUT
        try:
            while True:
                code = proc.poll()
                if code is not None:
                    self._proc = None
                    atexit.unregister(self._stop_at_exit)
                    if self._port_clash(log_offset):
                        return True
                    raise ClusterError(
                        f"postgres exited during start-up (exit code {code})",
                        log_file=self.log_file,
                    )
                if self._ready(binaries, proc.pid):
                    return False
                if time.monotonic() > deadline:
                    raise ClusterError(
                        f"postgres did not accept connections on {self.host}:{self.port} within {_START_TIMEOUT:.0f} s",
                        log_file=self.log_file,
                    )
                time.sleep(0.05)
        except BaseException:
            self.stop()
            raise

    def _ready(self, binaries: _Binaries, pid: int) -> bool:
        # postmaster.pid says "ready" only once *this* postmaster listens: a different server
        # answering on the same port (a clash) must not pass for ours.
        try:
            lines = (self.data_dir / "postmaster.pid").read_text(encoding="utf-8").splitlines()
        except (FileNotFoundError, UnicodeDecodeError):
            return False
        if len(lines) < 8 or lines[0].strip() != str(pid) or lines[7].strip() != "ready":
            return False
        try:
            with socket.create_connection((self.host, self.port), timeout=1.0):
                pass
        except OSError:
            return False
        check = [binaries.tool("pg_isready"), "-q", "-h", self.host, "-p", str(self.port)]
        check += ["-U", self.superuser, "-d", "postgres", "-t", "5"]
        result = subprocess.run(
            check,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=_child_env(None),
            check=False,
        )
        return result.returncode == 0

    def _port_clash(self, log_offset: int) -> bool:
        with self.log_file.open("rb") as f:
            f.seek(log_offset)
            new_output = f.read().decode("utf-8", "replace")
        if "Address already in use" in new_output:
            return True
        return not _port_free(self.host, self.port)

    def _child(self, command: list[str], user: _OsUser | None, log: IO[bytes]) -> dict[str, Any]:
        """The subprocess arguments of a tool or the server: run as `user` in the cluster's folder, its
        output into `log`, without PG* variables."""
        return {
            "args": _as_user(command, user),
            "stdin": subprocess.DEVNULL,
            "stdout": log,
            "stderr": subprocess.STDOUT,
            "cwd": self.root,
            "env": _child_env(user),
        }

    @contextlib.contextmanager
    def _log(self, headline: str) -> Iterator[IO[bytes]]:
        with self.log_file.open("ab") as log:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            log.write(f"=== devdb {stamp} {headline}\n".encode())
            log.flush()
            yield log

    def _stop_at_exit(self) -> None:
        if os.getpid() == self._owner_pid:
            self.stop()


# -- helpers ----------------------------------------------------------------------------------


@functools.cache
def _binaries() -> _Binaries:
    """PostgreSQL's bindir and pkglibdir: `pg_config --bindir` where it names a server, else the newest
    major Debian installed (/usr/lib/postgresql/<major>), so any distribution's major serves."""
    candidates: list[Path] = []
    bindir = _pg_config("pg_config", "--bindir")
    if bindir:
        candidates.append(Path(bindir))
    majors = [p for p in _DEBIAN_SERVERS.glob("*") if p.name.isdigit()]
    candidates += [p / "bin" for p in sorted(majors, key=lambda p: int(p.name), reverse=True)]
    for candidate in candidates:
        if all(os.access(candidate / tool, os.X_OK) for tool in ("initdb", "postgres")):
            pkglibdir = _pg_config(str(candidate / "pg_config"), "--pkglibdir")
            return _Binaries(bindir=candidate, pkglibdir=Path(pkglibdir) if pkglibdir else candidate.parent / "lib")
    searched = " or ".join(map(str, candidates)) or f"pg_config's bindir or {_DEBIAN_SERVERS}/<major>/bin"
    raise ClusterError(f"no PostgreSQL server binaries (initdb, postgres) in {searched}")


def server_bindir() -> Path:
    """The folder of the PostgreSQL server programs every cluster of this module runs (pg_basebackup and
    pgbench beside them)."""
    return _binaries().bindir


def _pg_config(program: str, option: str) -> str | None:
    try:
        result = subprocess.run(
            [program, option],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    value = result.stdout.strip()
    return value if result.returncode == 0 and value else None


def _os_user() -> _OsUser:
    try:
        entry = pwd.getpwnam(_OS_USER)
    except KeyError:
        raise ClusterError(f"running as root, but there is no {_OS_USER!r} OS user to run the server as") from None
    if shutil.which("setpriv") is None:
        raise ClusterError("running as root needs setpriv (util-linux) to drop to postgres")
    groups = frozenset(os.getgrouplist(entry.pw_name, entry.pw_gid))
    return _OsUser(uid=entry.pw_uid, gid=entry.pw_gid, groups=groups, home=entry.pw_dir)


def _as_user(command: list[str], user: _OsUser | None) -> list[str]:
    if user is None:
        return command
    drop = ["setpriv", f"--reuid={_OS_USER}", f"--regid={_OS_USER}", "--init-groups"]
    return [*drop, *command]


def _child_env(user: _OsUser | None) -> dict[str, str]:
    """The environment without PG* variables, which could redirect a tool or the server."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
    if user is not None:
        env.update(HOME=user.home, USER=_OS_USER, LOGNAME=_OS_USER)
    return env


def _traversable(folder: Path, user: _OsUser) -> bool:
    st = folder.stat()
    mode = st.st_mode
    if st.st_uid == user.uid:
        return bool(mode & stat.S_IXUSR)
    if st.st_gid in user.groups:
        return bool(mode & stat.S_IXGRP)
    return bool(mode & stat.S_IXOTH)


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as postgres does
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc.errno != errno.EADDRINUSE
        return True


def _shutdown(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT (fast shutdown), then SIGQUIT (immediate), then SIGKILL for it and its children."""
    for signum, timeout in ((signal.SIGINT, _STOP_TIMEOUT), (signal.SIGQUIT, _QUIT_TIMEOUT)):
        if proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            continue
        return
    # The postmaster hangs: kill it and its children (each of which is its own session
    # leader, so a process-group kill would miss them).
    children = _children(proc.pid)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    for child in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
    proc.wait()


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 1 and fields[1] == str(pid):
            found.append(int(entry.name))
    return found


def _conf_value(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace("'", "''")
    return f"'{escaped}'"


def _dsn_value(value: str) -> str:
    if value and not any(c in value for c in " '\\\t\n="):
        return value
    escaped = value.replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"


def _tail(path: Path, lines: int) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])
