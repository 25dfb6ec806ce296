"""`qinglong shell serve` with `processes = 2` (qinglong.shell.processes) as an operator runs it: a parent
and two children sharing the worker and user ports (SO_REUSEPORT), one admin listener whose /metrics sums
both children, the Worker protocol and the user API through them, every process's pool recovering when
the database drops its connections, SIGTERM ending every process with exit 0, no child outliving a
SIGKILLed parent, a child's death stopping the shell, and a bad `processes` refused in one line.
Touches: a fresh database, a temporary folder, child processes and loopback ports.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import psycopg
import pytest

from qinglong.wire import ql3w
from tests.conftest import Database as PgDatabase
from tests.integration.shell.conftest import (
    Pki,
    Seed,
    Shell,
    WorkerClient,
    shell_process,
    user_call,
    user_http,
    wait_for,
    worker_round_trip,
)
from tests.integration.shell.test_serve import _write_config
from tests.support.env import free_port

pytestmark = pytest.mark.db

SERVE = (sys.executable, "-m", "qinglong.cli", "shell", "serve", "--config")
_SAMPLE = re.compile(r"^(\w+)(?:\{(.*)\})? (\S+)$")


def _children(pid: int) -> set[int]:
    """The processes whose parent is `pid` (from /proc)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _listening(port: int) -> int:
    """How many listening TCP sockets (IPv4) are bound to `port`."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == port and fields[3] == "0A":  # 0A: LISTEN
            count += 1
    return count


def _metrics_folder(pid: int) -> str:
    """The PROMETHEUS_MULTIPROC_DIR a shell process was started with."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return next(v for v in environ if v.startswith(b"PROMETHEUS_MULTIPROC_DIR=")).split(b"=", 1)[1].decode()


def _samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and m[1] == name:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m[2] or ""))
            out.append((labels, float(m[3])))
    return out


class Running:
    def __init__(self, proc: asyncio.subprocess.Process, ports: tuple[int, int, int], shell: Shell) -> None:
        self.proc, self.ports, self.shell = proc, ports, shell

    async def metrics(self) -> str:
        async with aiohttp.ClientSession() as http, http.get(f"{self.shell.admin_url}/metrics") as resp:
            assert resp.status == 200
            return await resp.text()


@pytest.fixture
async def running(tmp_path: Path, pki: Pki, database: PgDatabase, seed: Seed) -> AsyncIterator[Running]:
    """The shell with processes = 2, healthy (every child listening); stopped with SIGTERM after the test
    if it still runs."""
    ports = (free_port(), free_port(), free_port())
    config = _write_config(tmp_path, pki, database.runtime_dsn, ports)
    config.write_text("processes = 2\n" + config.read_text())
    async with shell_process(config, ports, database.runtime_dsn) as (proc, shell):
        yield Running(proc, ports, shell)


async def test_two_processes_share_the_ports_and_sum_their_metrics(running: Running, pki: Pki, seed: Seed) -> None:
    worker_port, user_port, admin_port = running.ports
    assert _listening(worker_port) == 2 and _listening(user_port) == 2  # one socket per child, SO_REUSEPORT
    assert _listening(admin_port) == 1  # the parent's alone
    children = _children(running.proc.pid)
    assert len(children) == 2

    # The Worker protocol end to end, and user calls, each on a new connection so the kernel spreads them.
    async with WorkerClient(running.shell, seed.worker_a, pki.client_context(pki.worker_a)) as client:
        await worker_round_trip(client, renewals=3)
    calls = 40
    for _ in range(calls):
        async with user_http(pki) as http:
            reply = await user_call(
                http, running.shell, "GET", f"/api/v3/projects/{seed.project_p}/runs", token=seed.viewer.token
            )
            assert reply.status == 200, reply

    text = await running.metrics()
    accepted = {
        int(labels["pid"]): value
        for labels, value in _samples(text, "qinglong_shell_connections_accepted")
        if labels["listener"] == "user"
    }
    assert set(accepted) == children and all(value > 0 for value in accepted.values()), accepted
    assert sum(accepted.values()) == calls
    listed = [v for labels, v in _samples(text, "qinglong_shell_requests_total") if labels["route"] == "user.runs.list"]
    assert listed == [calls]  # one series: the children's counts summed
    renewals = [
        v for labels, v in _samples(text, "qinglong_shell_requests_total") if labels["route"] == "worker.lease_control"
    ]
    assert renewals == [3]
    assert "pid=" not in "".join(line for line in text.splitlines() if line.startswith("qinglong_shell_requests_total"))


async def test_sighup_to_the_parent_reloads_every_child(running: Running, tmp_path: Path) -> None:
    """SIGHUP is passed on to the children, and each reads shell.toml again: both log shell.reloaded naming the
    secret the file now also accepts (docs/operations.md, "Secret rotation")."""
    accepted = tmp_path / "next.secret"
    accepted.write_bytes(os.urandom(32).hex().encode())
    accepted.chmod(0o600)
    config = tmp_path / "shell.toml"
    text = config.read_text()
    config.write_text(re.sub(r"^(cluster_secret_file = .*)$", rf'\1\naccepted_secret_file = "{accepted}"', text,
                             flags=re.M))  # fmt: skip
    running.proc.send_signal(signal.SIGHUP)
    assert running.proc.stderr is not None
    reloaded: list[dict[str, object]] = []
    while len(reloaded) < 2:
        line = await asyncio.wait_for(running.proc.stderr.readline(), 15)
        assert line, "the shell's stderr ended"
        if b"shell.reload" in line:
            reloaded.append(json.loads(line))
    assert [r["event"] for r in reloaded] == ["shell.reloaded", "shell.reloaded"], reloaded
    assert {r["accepted_key_id"] for r in reloaded} == {ql3w.key_id(accepted.read_bytes())}
    assert running.proc.returncode is None and len(_children(running.proc.pid)) == 2, "nothing restarted"


async def test_every_process_replaces_its_connections_after_the_database_dropped_them(
    running: Running, pki: Pki, seed: Seed, database: PgDatabase
) -> None:
    """As after a failover: every backend of ql_runtime ends; each child's pool (and the parent's) notices on
    its next checkout and reconnects, so no call fails and none waits for psycopg_pool's back-off."""
    path = f"/api/v3/projects/{seed.project_p}/runs"

    async def calls(n: int) -> list[tuple[int, float]]:
        out = []
        for _ in range(n):  # a new connection each: the kernel spreads them over both children
            async with user_http(pki) as http:
                started = time.monotonic()
                reply = await user_call(http, running.shell, "GET", path, token=seed.viewer.token)
                out.append((reply.status, time.monotonic() - started))
        return out

    def per_child(text: str) -> dict[str, float]:
        return {
            labels["pid"]: value
            for labels, value in _samples(text, "qinglong_shell_connections_accepted")
            if labels["listener"] == "user"
        }

    await calls(20)
    before = per_child(await running.metrics())
    backends = "select pid from pg_stat_activity where datname = %s and usename = 'ql_runtime'"
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        assert len(conn.execute(backends, (database.name,)).fetchall()) >= 3  # both children's and the parent's
        conn.execute(
            "select pg_terminate_backend(pid) from pg_stat_activity where datname = %s and usename = 'ql_runtime'",
            (database.name,),
        )

        async def ended() -> bool:
            return not conn.execute(backends, (database.name,)).fetchall()

        await wait_for(ended, within=10)
    after_calls = await calls(20)
    assert all(status == 200 and took < 0.9 for status, took in after_calls), after_calls
    after = per_child(await running.metrics())
    assert len(after) == 2 and all(after[pid] > before[pid] for pid in after), (before, after)
    async with aiohttp.ClientSession() as http, http.get(f"{running.shell.admin_url}/healthz") as resp:
        assert resp.status == 200


async def test_sigterm_stops_every_process_with_exit_0(running: Running) -> None:
    children = _children(running.proc.pid)
    running.proc.send_signal(signal.SIGTERM)
    _, err = await asyncio.wait_for(running.proc.communicate(), 40)
    assert running.proc.returncode == 0, err.decode()
    assert not any(_alive(pid) for pid in children)
    assert _listening(running.ports[0]) == 0 and _listening(running.ports[2]) == 0


async def test_no_child_outlives_a_sigkilled_parent(running: Running) -> None:
    children = _children(running.proc.pid)
    folder = _metrics_folder(min(children))
    running.proc.kill()
    await running.proc.wait()

    async def gone() -> bool:
        return not any(_alive(pid) for pid in children)

    await wait_for(gone, within=20, interval=0.1)  # each stopped in order at its pipe's EOF
    assert _listening(running.ports[0]) == 0 and _listening(running.ports[1]) == 0
    # The one thing left is the metrics folder (under systemd the unit's private /tmp goes with the unit):
    # rmtree raises FileNotFoundError if it were not there.
    shutil.rmtree(folder)


async def test_a_child_that_dies_stops_the_shell_with_exit_1(running: Running) -> None:
    children = sorted(_children(running.proc.pid))
    os.kill(children[0], signal.SIGKILL)
    _, err = await asyncio.wait_for(running.proc.communicate(), 40)
    assert running.proc.returncode == 1
    assert '"event": "shell.process_exited"' in err.decode()
    assert not any(_alive(pid) for pid in children)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("processes = 0", "processes: outside 1..64"),
        ("processes = 65", "processes: outside 1..64"),
        ('processes = "two"', "processes: expected an integer"),
    ],
)
def test_a_bad_processes_value_is_one_line_and_exit_2(
    tmp_path: Path, pki: Pki, database: PgDatabase, line: str, message: str
) -> None:
    config = _write_config(tmp_path, pki, database.runtime_dsn, (free_port(), free_port(), free_port()))
    config.write_text(f"{line}\n" + config.read_text())
    out = subprocess.run([*SERVE, str(config)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and message in out.stderr, out.stderr


def test_port_0_with_several_processes_is_refused(tmp_path: Path, pki: Pki, database: PgDatabase) -> None:
    config = _write_config(tmp_path, pki, database.runtime_dsn, (0, free_port(), free_port()))
    config.write_text("processes = 2\n" + config.read_text())
    out = subprocess.run([*SERVE, str(config)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "fixed port" in out.stderr, out.stderr
