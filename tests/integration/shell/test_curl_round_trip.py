"""The README's curl example works: scripts/worker_round_trip.sh drives open session → pull →
starting → running → three renewals → completion with curl, openssl and jq only, against the real shell
over TLS 1.3 with a client certificate. Touches: a fresh database, the in-process shell, a subprocess.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import psycopg
import pytest

from tests.conftest import Database as PgDatabase
from tests.integration.shell.conftest import Pki, Seed, Shell

pytestmark = pytest.mark.db
SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "worker_round_trip.sh"


async def test_the_readme_curl_round_trip_completes_a_run(
    shell: Shell, pki: Pki, seed: Seed, database: PgDatabase
) -> None:
    env = os.environ | {
        "ORIGIN": shell.worker_url,
        "WORKER": pki.worker_a_id,
        "CERT": str(pki.worker_a.certificate),
        "KEY": str(pki.worker_a.key),
        "CA": str(pki.ca),
    }
    proc = await asyncio.create_subprocess_exec(
        "bash", str(SCRIPT), env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, (out.decode(), err.decode())
    lines = out.decode().splitlines()
    assert [line.split(":")[0] for line in lines[2:]] == [
        "starting", "running", "renewed", "renewed", "renewed", "complete"
    ]  # fmt: skip
    assert '"leaseVersion":4' in lines[-2] and '"runStatus":"succeeded"' in lines[-1]
    with psycopg.connect(database.dsn()) as conn:
        row = conn.execute(
            "select count(*) filter (where status = 'succeeded'),"
            " (select count(*) from ql.run_attempts where running_at_ms is not null) from ql.runs"
        ).fetchone()
    assert row == (1, 1)
