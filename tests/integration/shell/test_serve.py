"""`qinglong shell serve --config FILE` as an operator runs it: a real process serving the three
listeners from a TOML file until SIGTERM, and a one-line error (exit 2) for a bad configuration.
Touches: a fresh database, a temporary folder, a child process and three loopback ports.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from tests.conftest import Database as PgDatabase
from tests.integration.shell.conftest import Pki
from tests.support.env import free_port

pytestmark = pytest.mark.db


def _write_config(folder: Path, pki: Pki, dsn: str, ports: tuple[int, int, int]) -> Path:
    secret = folder / "cluster.secret"
    secret.write_bytes(os.urandom(32).hex().encode())
    secret.chmod(0o600)
    config = folder / "shell.toml"
    config.write_text(
        f'[database]\ndsn = "{dsn}"\n\n[secret]\ncluster_secret_file = "{secret}"\n\n'
        f'[worker_listener]\nhost = "127.0.0.1"\nport = {ports[0]}\ncertificate = "{pki.server.certificate}"\n'
        f'key = "{pki.server.key}"\nclient_ca = "{pki.ca}"\n\n'
        f'[user_listener]\nhost = "127.0.0.1"\nport = {ports[1]}\ncertificate = "{pki.server.certificate}"\n'
        f'key = "{pki.server.key}"\n\n[admin_listener]\nhost = "127.0.0.1"\nport = {ports[2]}\n'
    )
    return config


async def test_serve_answers_on_its_listeners_and_stops_on_sigterm(
    tmp_path: Path, pki: Pki, database: PgDatabase
) -> None:
    ports = (free_port(), free_port(), free_port())
    config = _write_config(tmp_path, pki, database.runtime_dsn, ports)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "qinglong.cli", "shell", "serve", "--config", str(config),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(100):
                try:
                    async with http.get(f"http://127.0.0.1:{ports[2]}/healthz") as resp:
                        assert resp.status == 200
                        break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.1)
            else:
                raise AssertionError("the admin listener never answered")
            ctx = pki.client_context()
            async with http.get(f"https://127.0.0.1:{ports[1]}/openapi.json", ssl=ctx) as resp:
                assert resp.status == 200 and (await resp.json())["openapi"] == "3.1.0"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 20)
    assert proc.returncode == 0, err.decode()


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda text: text.replace("[database]", "[db]"), "shell.toml: unknown field 'db'"),
        (lambda text: text.replace('host = "127.0.0.1"\nport = ', 'host = "0.0.0.0"\nport = ', 3), "loopback"),
        (lambda text: text.replace('host = "127.0.0.1"\nport = ', 'host = "no-such-host"\nport = ', 3), "loopback"),
        (lambda text: text.replace("[secret]", "[database.extra]\nx = 1\n\n[secret]"), "unknown field 'extra'"),
        (lambda text: text + "pool = 4\n", "admin_listener: unknown field 'pool'"),
        (lambda text: text.replace("\n\n[secret]", '\npool_size = "4"\n\n[secret]'), "pool_size: expected an integer"),
    ],
)
def test_a_bad_configuration_is_one_line_and_exit_2(
    tmp_path: Path, pki: Pki, database: PgDatabase, mutate: Callable[[str], str], message: str
) -> None:
    config = _write_config(tmp_path, pki, database.runtime_dsn, (1, 2, 3))
    config.write_text(mutate(config.read_text()))
    out = subprocess.run(
        [sys.executable, "-m", "qinglong.cli", "shell", "serve", "--config", str(config)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and message in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_a_group_readable_secret_is_refused(tmp_path: Path, pki: Pki, database: PgDatabase) -> None:
    config = _write_config(tmp_path, pki, database.runtime_dsn, (1, 2, 3))
    (tmp_path / "cluster.secret").chmod(0o640)
    out = subprocess.run(
        [sys.executable, "-m", "qinglong.cli", "shell", "serve", "--config", str(config)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert out.returncode == 2 and "chmod 600" in out.stderr, out.stderr
