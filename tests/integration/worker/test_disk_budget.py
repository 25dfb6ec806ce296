"""The disk budget on a real `qinglong-worker run` process (worker/qinglong/worker/disk.py) whose work_dir is a
small tmpfs of its own: filled below `min_free_mib`, the Worker pulls nothing (a queued Run stays queued, `disk.low`
is logged once and `qinglong-worker status` says so) while the task it runs is still renewed and completed; with
the space back it logs `disk.ok` once and pulls again.
Touches: a fresh database, the in-process shell on TLS 1.3 loopback, a Worker process and its tasks, a tmpfs
mounted on the test's work_dir (root only; unmounted at the end) and the test's folders.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.integration.worker.conftest import ENDED_RUN, Rig, child_subreaper, poll

pytestmark = [
    pytest.mark.db,
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root"),
]


@contextmanager
def tmpfs(folder: Path, size: str) -> Iterator[None]:
    folder.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(folder)], check=True)
    try:
        yield
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=True)


def status(config: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "qinglong.worker", "status", "--config", str(config)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return done.stdout


async def test_a_worker_short_of_disk_pulls_nothing_but_finishes_its_task_and_pulls_again_once_space_returns(
    rig: Rig,
) -> None:
    rig.set_lease_ttl(2000)  # a task that outlives a few Leases: it completes only if it is renewed meanwhile
    config = rig.write_config(tick_seconds=0.2, extra=("allow_root_tasks = true", "min_free_mib = 4"))
    config.write_text(config.read_text().replace("capacity = 1\n", "capacity = 2\n"))
    filler = rig.work_dir / "filler"
    with tmpfs(rig.work_dir, "8m"), child_subreaper():
        worker = rig.start_worker_process(config)
        running = rig.add_run({"argv": ["sh", "-c", "echo begun; sleep 12; echo done"], "maxAttempts": 1})
        await poll(lambda: rig.run_status(running) != "queued", within=20)
        assert rig.run_status(running) == "running", worker.output()
        filler.write_bytes(b"\0" * (6 << 20))  # about 2 MiB left of 8: below min_free_mib
        await poll(lambda: "disk.low" in worker.output(), within=10)
        assert rig.run_status(running) == "running", "the task ended before the disk was seen low"
        version = rig.lease_version(running)
        queued = rig.add_run({"argv": ["echo", "later"], "maxAttempts": 1})
        await poll(lambda: rig.run_status(running) in ENDED_RUN, within=20)
        assert rig.run_status(running) == "succeeded", worker.output()
        assert rig.lease_version(running) > version, "no renewal while the disk was low"
        assert rig.output(running) == b"begun\ndone\n"
        await asyncio.sleep(1.0)  # five more ticks with a free slot
        assert rig.run_status(queued) == "queued"
        said = status(config)
        assert "  disk: NOT pulling: free space is below min_free_mib; free " in said, said
        assert "(min_free_mib: 4.0 MiB)" in said

        filler.unlink()
        await poll(lambda: rig.run_status(queued) in ENDED_RUN, within=20)
        assert rig.run_status(queued) == "succeeded" and rig.output(queued) == b"later\n"
        # The status file is written after each tick, so it says so by the end of the tick that pulled (under load,
        # a tick that pulls, starts and completes a Run can outlast the Run's end as the database shows it).
        await poll(lambda: "  disk: pulling; free " in status(config), within=20, every=0.5)
        worker.popen.send_signal(signal.SIGTERM)
        assert await worker.wait(10) == 0, worker.output()
    log = worker.output()
    assert log.count('"disk.low"') == 1 and log.count('"disk.ok"') == 1, log
    assert log.index('"disk.low"') < log.index('"disk.ok"')
