"""An idle Worker stays small (decision 0026): a real `qinglong-worker run` process, enrolled and talking to the
shell (a session open, a heartbeat and an empty pull each tick), holds at most 35 MiB RSS (VmRSS from
/proc/<pid>/status) after ten seconds of ticks with nothing to do, and ran one task before that; its entry
point imports no general HTTP library (the Worker's HTTP/1.1 is worker/https.py).
Touches: a fresh database, the in-process shell on TLS 1.3 loopback, one Worker process and its task process
(this process is their child subreaper meanwhile), the journal's status file (read), a child interpreter.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from qinglong.worker.admin import status_path
from tests.integration.worker.conftest import ENDED_RUN, Rig, child_subreaper, poll

pytestmark = pytest.mark.db

IDLE_RSS_MAX_KIB = 35 * 1024
IDLE_S = 10.0


def vm_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {key} for {pid}")


def contacts(journal: Path) -> int | None:
    try:
        value = json.loads(status_path(journal).read_bytes()).get("last_contact_ms")
    except (FileNotFoundError, ValueError):
        return None
    return None if value is None else int(value)


async def test_an_idle_worker_process_holds_at_most_35_mib(rig: Rig) -> None:
    run = rig.add_run({"argv": ["sh", "-c", "echo hello"], "maxAttempts": 1})
    config = rig.write_config(tick_seconds=0.2)
    with child_subreaper():
        worker = rig.start_worker_process(config)
        await poll(lambda: rig.run_status(run) in ENDED_RUN, within=30)
        assert rig.run_status(run) == "succeeded", worker.output()
        first = contacts(rig.journal_path)
        await asyncio.sleep(IDLE_S)
        rss = vm_kib(worker.pid, "VmRSS")
        later = contacts(rig.journal_path)
        assert worker.popen.poll() is None, worker.output()
        # it was ticking, not stuck: its contact with the shell moved on while idle
        assert first is not None and later is not None and later - first >= (IDLE_S - 2) * 1000
        print(f"idle Worker: VmRSS {rss / 1024:.1f} MiB, RssAnon {vm_kib(worker.pid, 'RssAnon') / 1024:.1f} MiB")
        assert rss <= IDLE_RSS_MAX_KIB, f"idle Worker VmRSS {rss / 1024:.1f} MiB > 35 MiB"


def test_the_worker_entry_point_imports_no_http_library() -> None:
    probe = (
        "import sys, qinglong.worker.run, qinglong.worker.lifecycle\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'aiohttp', 'multidict', 'yarl', 'http', 'urllib3',"
        " 'requests', 'httpx', 'psycopg'}))"
    )
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert found.stdout.strip() == "[]", found.stdout + found.stderr
