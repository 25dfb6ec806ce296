"""`qinglong run logs` against a real Worker process and the in-process shell's user API, by project and task
names: `--follow` prints a running task's output while it runs and ends by itself when the Run ends; stdout
and stderr arrive on the CLI's stdout and stderr; a 5 MB output prints its head, one marker saying how many
bytes were dropped, and its tail up to the last line; bad input is one line and exit 2.
Touches: a fresh database, the in-process shell, a Worker process and its tasks, CLI child processes.
"""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import pytest

from tests.integration.cli.test_cli import _env, acli, refused
from tests.integration.worker.conftest import Rig, poll

pytestmark = pytest.mark.db


def _api(rig: Rig, tmp_path: Path) -> tuple[str, ...]:
    token = tmp_path / "operator.token"
    token.write_text(rig.operator.token + "\n")
    token.chmod(0o600)
    ca, shell = str(rig.pki.ca), rig.served.shell
    assert shell is not None
    return ("--api", shell.user_url, "--ca", ca, "--token-file", str(token), "--project", "project-w")


async def test_follow_prints_a_running_task_s_output_and_ends_with_the_run(rig: Rig, tmp_path: Path) -> None:
    rig.set_lease_ttl(4000)
    go = tmp_path / "go"
    script = f"echo first; while [ ! -e {go} ]; do sleep 0.1; done; echo second >&2; echo third"
    run = rig.add_run({"argv": ["sh", "-c", script], "timeoutMs": 60000})
    worker = rig.start_worker_process(rig.write_config(tick_seconds=0.3))
    follower = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "qinglong.cli", "run", "logs", *_api(rig, tmp_path), "--run", run, "--follow",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_env(),
    )  # fmt: skip
    assert follower.stdout is not None and follower.stderr is not None
    first = await asyncio.wait_for(follower.stdout.readline(), 30)
    assert first == b"first\n"
    assert rig.run_status(run) == "running"  # printed while the task still runs
    assert follower.returncode is None  # and the follower goes on
    go.touch()
    out, err = await asyncio.wait_for(follower.communicate(), 30)
    assert await follower.wait() == 0, err
    assert (out, err) == (b"third\n", b"second\n")
    assert rig.run_status(run) == "succeeded"
    assert worker.popen.poll() is None


async def test_a_five_megabyte_output_prints_head_marker_and_tail(rig: Rig, tmp_path: Path) -> None:
    rig.set_lease_ttl(4000)
    line = b"x" * 99 + b"\n"  # 100 bytes; 52,430 of them (5,243,000 bytes), then the last line
    written = line * 52430 + b"the last line\n"
    run = rig.add_run({"argv": ["sh", "-c", "yes " + "x" * 99 + " | head -n 52430; echo the last line"]})
    task = rig.one("select t.name from ql.runs r join ql.tasks t on t.id = r.task_id where r.id = %s", (run,))
    rig.start_worker_process(rig.write_config(tick_seconds=0.3))
    await poll(lambda: rig.run_status(run) == "succeeded", within=60, every=0.2)

    out = await acli("run", "logs", *_api(rig, tmp_path), "--run", run)
    assert out.code == 0 and out.stderr == "", out.stderr[:500]
    head, dropped, tail = re.split(r"\n\[qinglong: (\d+) bytes of stdout dropped here\]\n", out.stdout)
    assert written.startswith(head.encode()) and written.endswith(tail.encode())  # exact bytes at both ends
    assert tail.endswith("x\nthe last line\n")
    assert len(head) + int(dropped) + len(tail) == len(written)  # nothing else missing, nothing repeated
    assert 1024 * 1024 <= len(head) + len(tail) <= (1024 + 256) * 1024  # head + tail (+ at most one chunk)

    # names work: the task's history by its name; refusals are one line
    listed = await acli("run", "list", *_api(rig, tmp_path), "--task", str(task), "--ids")
    assert (listed.code, listed.stdout) == (0, f"{run}\n"), listed
    refused(await acli("run", "logs", *_api(rig, tmp_path), "--run", run, "--attempt", "0"), 2, "--attempt")
    missing = refused(await acli("run", "logs", *_api(rig, tmp_path), "--run", run, "--attempt", "2"), 2)
    assert missing == f"qinglong: run logs {run}: no such Attempt (`qinglong run show` lists the Run's Attempts)"
    refused(await acli("run", "list", *_api(rig, tmp_path), "--task", "no-such-task"), 2, "no task 'no-such-task'")
