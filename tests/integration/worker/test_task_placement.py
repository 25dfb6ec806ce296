"""Where and as whom a task runs (docs/operations.md §5): by default in its Run's own directory
`work_dir/tasks/<run_id>/` as the Worker's own user; a plan's `cwd`, `user` and `group` only as far
as worker.toml allows (`run_as`, `run_as_groups`, `allow_absolute_cwd`, `allow_root_tasks`); a plan
the Worker may not honour is a typed start failure before anything is created or spawned.
Touches: a fresh database, the in-process shell on TLS 1.3 loopback, real Worker processes and their
task processes (these tests run as root: the switch to `nobody` is real), temporary folders.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import signal
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.integration.worker.conftest import ENDED_RUN, Rig, child_subreaper, poll

pytestmark = [
    pytest.mark.db,
    pytest.mark.skipif(os.geteuid() != 0, reason="switching to another user needs root"),
]

NOBODY = pwd.getpwnam("nobody")


async def run_one(rig: Rig, plan: Mapping[str, Any], config: Sequence[str]) -> str:
    """Run one plan to its end under a real Worker process configured with `config` lines. A start failure's
    log line names its code (the `error` of the move to start_failed)."""
    run = rig.add_run({"maxAttempts": 1, **plan})
    path = rig.write_config(tick_seconds=0.2, extra=config)
    with child_subreaper():
        worker = rig.start_worker_process(path)
        await poll(lambda: rig.run_status(run) in ENDED_RUN, within=20, every=0.05)
        await poll(lambda: rig.state() == "completed", within=10)
        worker.popen.send_signal(signal.SIGTERM)
        assert await worker.wait(10) == 0, worker.output()
    moves = [json.loads(line) for line in worker.output().splitlines() if '"record.state"' in line]
    failed = [m for m in moves if m["to"] == "start_failed"]
    assert [m["error"] for m in failed] == ([rig.record().data["error_code"]] if failed else []), failed
    return run


def assert_refused(rig: Rig, run: str, code: str, marker: Path) -> None:
    """A start failure with `code`: the Run failed, its timeline names the code, nothing ran or was made."""
    assert rig.run_status(run) == "failed"
    [attempt] = rig.attempts(run)
    assert (attempt["status"], attempt["error_code"], attempt["exit_code"]) == ("failed", code, None)
    assert rig.one(
        "select count(*) from ql.run_events where run_id = %s and payload::text like %s", (run, f'%"{code}"%')
    ), f"no event of the Run names {code}: {rig.events(run)}"
    record = rig.record()
    assert record.handle is None and record.data["error_code"] == code
    assert not (rig.work_dir / record.offer_id).exists(), "a launch folder exists: something was spawned"
    assert not (rig.work_dir / "tasks" / run).exists(), "the Run's directory was created"
    assert not marker.exists(), "the task ran"


async def test_by_default_a_task_runs_in_its_run_s_own_directory_as_the_worker_s_user(rig: Rig) -> None:
    run = await run_one(rig, {"argv": ["sh", "-c", "id -u; pwd; echo x > made-here"]}, ["allow_root_tasks = true"])
    assert rig.run_status(run) == "succeeded", rig.output(run, "stderr").decode()
    run_dir = rig.work_dir / "tasks" / run
    assert rig.output(run).decode() == f"{os.geteuid()}\n{run_dir}\n"
    assert (run_dir / "made-here").read_text() == "x\n"
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    for folder in (rig.work_dir, rig.work_dir / "tasks"):  # reachable, not listable, by a task user
        assert stat.S_IMODE(folder.stat().st_mode) == 0o711


async def test_a_root_worker_runs_no_task_as_root_unless_its_config_says_so(rig: Rig, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    run = await run_one(rig, {"argv": ["touch", str(marker)]}, ["run_as = []"])
    assert_refused(rig, run, "plan.root_not_allowed", marker)


async def test_a_task_as_nobody_really_runs_as_nobody_in_a_directory_it_owns(rig: Rig) -> None:
    plan = {"argv": ["sh", "-c", "id -u; id -g; id -G; pwd; echo x > mine"], "user": "nobody", "cwd": "out/deep"}
    run = await run_one(rig, plan, ['run_as = ["nobody"]'])
    assert rig.run_status(run) == "succeeded", rig.output(run, "stderr").decode()
    run_dir = rig.work_dir / "tasks" / run
    groups = " ".join(str(g) for g in sorted(os.getgrouplist("nobody", NOBODY.pw_gid)))
    assert rig.output(run).decode() == f"{NOBODY.pw_uid}\n{NOBODY.pw_gid}\n{groups}\n{run_dir / 'out' / 'deep'}\n"
    for path in (run_dir, run_dir / "out", run_dir / "out" / "deep", run_dir / "out" / "deep" / "mine"):
        assert (path.stat().st_uid, path.stat().st_gid) == (NOBODY.pw_uid, NOBODY.pw_gid), path


async def test_a_user_not_on_the_allow_list_is_a_start_failure_and_nothing_is_spawned(rig: Rig, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    plan = {"argv": ["touch", str(marker)], "user": "daemon"}
    run = await run_one(rig, plan, ['run_as = ["nobody"]', "allow_root_tasks = true"])
    assert_refused(rig, run, "plan.user_not_allowed", marker)


@pytest.mark.parametrize(
    ("plan", "code"),
    [
        ({"group": "nogroup"}, "plan.group_not_allowed"),
        ({"cwd": "../elsewhere"}, "plan.cwd_outside"),
        ({"cwd": "a/../../b"}, "plan.cwd_outside"),
        ({"cwd": "/"}, "plan.cwd_absolute"),
    ],
)
async def test_a_plan_the_worker_may_not_honour_is_a_typed_start_failure(
    rig: Rig, tmp_path: Path, plan: dict[str, str], code: str
) -> None:
    marker = tmp_path / "ran"
    run = await run_one(rig, {"argv": ["touch", str(marker)], **plan}, ["allow_root_tasks = true"])
    assert_refused(rig, run, code, marker)


async def test_an_absolute_cwd_needs_the_worker_s_consent_and_must_exist(rig: Rig, tmp_path: Path) -> None:
    there = tmp_path / "there"
    there.mkdir()
    config = ["allow_root_tasks = true", "allow_absolute_cwd = true"]
    run = await run_one(rig, {"argv": ["sh", "-c", "pwd; echo x > made"], "cwd": str(there)}, config)
    assert rig.run_status(run) == "succeeded", rig.output(run, "stderr").decode()
    assert rig.output(run).decode() == f"{there}\n" and (there / "made").read_text() == "x\n"


async def test_a_group_on_the_allow_list_is_the_task_s_group(rig: Rig) -> None:
    plan = {"argv": ["sh", "-c", "id -u; id -g; id -G"], "user": "nobody", "group": "nogroup"}
    run = await run_one(rig, plan, ['run_as = ["nobody"]', 'run_as_groups = ["nogroup"]'])
    assert rig.run_status(run) == "succeeded", rig.output(run, "stderr").decode()
    gid = grp.getgrnam("nogroup").gr_gid
    assert rig.output(run).decode() == f"{NOBODY.pw_uid}\n{gid}\n{gid}\n"
