"""Integration tests of qinglong.devdb: real initdb/postgres/psql processes; touches only /tmp.

Every cluster lives in a fresh `tempfile.mkdtemp(dir="/tmp")` chmodded 0755 (not pytest's
tmp_path: as root the server runs as `postgres`, which cannot traverse /tmp/pytest-of-root).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from qinglong.devdb import Cluster, ClusterError

pytestmark = pytest.mark.db

_TMP = Path("/tmp")  # noqa: S108  (world-traversable, unlike pytest's tmp_path)
_CLI = [sys.executable, "-m", "qinglong.devdb", "run"]


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="devdb-test-", dir=_TMP))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _psql(cluster: Cluster, sql: str) -> str:
    result = subprocess.run(
        ["psql", "-X", "-At", "-v", "ON_ERROR_STOP=1", "-c", sql],
        env={**os.environ, **cluster.env()},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return result.stdout.strip()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _processes_using(folder: Path | str) -> list[int]:
    """Processes whose command line names `folder` or whose cwd is inside it.

    `folder` may also be a path prefix such as "/tmp/qinglong-devdb-". A server's backends
    rewrite their command line but keep the postmaster's cwd, the data folder.
    """
    needle = str(folder)
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if needle in cmdline or cwd.startswith(needle):
            found.append(int(entry.name))
    return found


def _assert_gone(pid: int, folder: Path) -> None:
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert _processes_using(folder) == []


def test_start_query_settings_and_stop(root: Path) -> None:
    cluster = Cluster(root, fsync=False)
    try:
        cluster.start()
        pid = cluster.pid
        assert pid is not None and _alive(pid)
        assert _psql(cluster, "select 1") == "1"
        assert _psql(cluster, "show fsync") == "off"
        assert _psql(cluster, "show synchronous_commit") == "off"
        assert _psql(cluster, "show listen_addresses") == "127.0.0.1"
        assert _psql(cluster, "show max_connections") == "200"
        assert "pg_cron" in _psql(cluster, "show shared_preload_libraries")
        assert _psql(cluster, "show cron.database_name") == "postgres"
        assert _psql(cluster, "select current_user") == "postgres"
        assert cluster.dsn() == (f"host=127.0.0.1 port={cluster.port} user=postgres dbname=postgres")
        assert cluster.sqitch_target("app") == f"db:pg://postgres@127.0.0.1:{cluster.port}/app"
        assert cluster.log_file.read_text().count("ready to accept connections") == 1
    finally:
        cluster.stop()
    _assert_gone(pid, cluster.data_dir)
    cluster.stop()  # idempotent


def test_fsync_on_without_cron_and_context_manager(root: Path) -> None:
    with Cluster(root, preload_cron=False, settings={"work_mem": "8MB"}) as cluster:
        pid = cluster.pid
        assert pid is not None
        assert _psql(cluster, "show fsync") == "on"
        assert "pg_cron" not in _psql(cluster, "show shared_preload_libraries")
        assert _psql(cluster, "show work_mem") == "8MB"
    _assert_gone(pid, cluster.data_dir)


def test_restart_keeps_data(root: Path) -> None:
    first = Cluster(root, fsync=False)
    with first:
        _psql(first, "create table kept (v text); insert into kept values ('still here')")
        first_pid = first.pid
    assert first_pid is not None
    _assert_gone(first_pid, first.data_dir)

    with first:  # the same object starts again
        assert _psql(first, "select v from kept") == "still here"
        again_pid = first.pid
    assert again_pid is not None
    _assert_gone(again_pid, first.data_dir)

    with Cluster(root, fsync=False) as second:  # a new object on the same folder
        assert _psql(second, "select v from kept") == "still here"
        second_pid = second.pid
    assert second_pid is not None
    _assert_gone(second_pid, second.data_dir)
    assert first.log_file.read_text().count("=== devdb") == 4  # one initdb, three starts


def test_port_clash_picks_another_port(root: Path) -> None:
    cluster = Cluster(root, fsync=False)
    taken = cluster.port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as blocker:
        blocker.bind(("127.0.0.1", taken))
        blocker.listen()
        with cluster:
            assert cluster.port != taken
            assert _psql(cluster, "select 2") == "2"
    assert "Address already in use" in cluster.log_file.read_text()


def test_failed_start_reports_log_and_leaves_nothing(root: Path) -> None:
    cluster = Cluster(root, fsync=False, settings={"shared_buffers": "not-a-size"})
    with pytest.raises(ClusterError, match="shared_buffers") as caught:
        cluster.start()
    assert "exited during start-up" in caught.value.summary
    assert not cluster.running
    assert _processes_using(cluster.data_dir) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="only root drops to the postgres user")
def test_root_inside_private_folder_is_refused() -> None:
    private = Path(tempfile.mkdtemp(prefix="ql-private-", dir="/tmp"))  # short: a socket path has at most 92 bytes
    try:
        with pytest.raises(ClusterError, match="cannot traverse"):
            Cluster(private / "cluster").start()
    finally:
        shutil.rmtree(private)


def test_cli_returns_child_exit_code_and_cleans_up() -> None:
    before = set(_TMP.glob("qinglong-devdb-*"))
    script = 'psql -X -At -c "show data_directory"; test "$(psql -X -At -c "show fsync")" = off || exit 9; exit 3'
    result = subprocess.run(
        [*_CLI, "--fsync", "off", "--", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 3, result.stderr
    assert set(_TMP.glob("qinglong-devdb-*")) == before
    # Its own cluster's folder only: other throw-away clusters may run on this machine meanwhile.
    folder = Path(result.stdout.strip()).parent
    assert folder.name.startswith("qinglong-devdb-"), result.stdout
    assert _processes_using(folder) == []


def test_cli_with_root_keeps_folder(root: Path) -> None:
    result = subprocess.run(
        [*_CLI, "--root", str(root), "--", "psql", "-X", "-At", "-c", "select 42"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "42"
    assert (root / "data" / "PG_VERSION").is_file()
    assert _processes_using(root / "data") == []


def test_cli_sigterm_stops_cluster(root: Path) -> None:
    marker = root / "child-ready"
    cluster_root = root / "cluster"
    script = f'psql -X -At -c "select 1" >/dev/null && touch {marker} && exec sleep 60'
    proc = subprocess.Popen(
        [*_CLI, "--root", str(cluster_root), "--fsync", "off", "--", "sh", "-c", script],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else b""
            assert time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()
    assert _processes_using(cluster_root) == []
    assert "shut down" in (cluster_root / "postgres.log").read_text()


def test_cli_errors_are_one_line() -> None:
    result = subprocess.run(
        [*_CLI, "--fsync", "off", "--", "/nonexistent/command"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "cannot run /nonexistent/command" in result.stderr
    assert "Traceback" not in result.stderr

    missing = subprocess.run([*_CLI, "--fsync", "off"], capture_output=True, text=True, timeout=60, check=False)
    assert missing.returncode == 2
    assert missing.stderr.count("\n") == 1
