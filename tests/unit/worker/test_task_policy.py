"""The Executor's plan checks (qinglong.worker.executor: TaskPolicy, where and as whom a task runs):
every refusal is typed and happens before anything is created. Touches: temporary folders.
"""

from __future__ import annotations

import grp
import os
from pathlib import Path

import pytest

from qinglong.worker import executor as executor_module
from qinglong.worker.executor import Executor, ExecutorRefused, TaskPolicy, _place


def code(policy: TaskPolicy, cwd: str | None = None, user: str | None = None, group: str | None = None) -> str:
    with pytest.raises(ExecutorRefused) as caught:
        _place(policy, cwd, user, group)
    return caught.value.code


ROOT = os.geteuid() == 0
AS_ROOT_TOO = TaskPolicy(allow_root_tasks=True)


@pytest.mark.parametrize(
    ("policy", "cwd", "user", "group", "expected"),
    [
        (AS_ROOT_TOO, None, "nobody", None, "plan.user_not_allowed"),
        (TaskPolicy(run_as=frozenset({"no-such-user-ql"})), None, "no-such-user-ql", None, "plan.user_unknown"),
        (AS_ROOT_TOO, None, None, "nogroup", "plan.group_not_allowed"),
        (TaskPolicy(run_as_groups=frozenset({"no-such-group-ql"}), allow_root_tasks=True), None, None,
         "no-such-group-ql", "plan.group_unknown"),
        (AS_ROOT_TOO, "/", None, None, "plan.cwd_absolute"),
        (TaskPolicy(allow_absolute_cwd=True, allow_root_tasks=True), "/no/such/dir/ql", None, None, "plan.cwd_missing"),
        (AS_ROOT_TOO, "..", None, None, "plan.cwd_outside"),
        (AS_ROOT_TOO, "a/../../b", None, None, "plan.cwd_outside"),
        (AS_ROOT_TOO, "a\x00b", None, None, "plan.cwd_outside"),
    ],
)  # fmt: skip
def test_a_plan_the_worker_may_not_honour_is_refused_with_a_stable_code(
    policy: TaskPolicy, cwd: str | None, user: str | None, group: str | None, expected: str
) -> None:
    assert code(policy, cwd, user, group) == expected


@pytest.mark.skipif(not ROOT, reason="a root Worker's default")
def test_a_root_worker_refuses_root_tasks_by_default_even_when_asked_by_name() -> None:
    assert code(TaskPolicy()) == "plan.root_not_allowed"
    assert code(TaskPolicy(run_as=frozenset({"root"})), user="root") == "plan.root_not_allowed"
    assert _place(AS_ROOT_TOO, None, None, None).uid is None


def test_a_worker_without_setuid_and_setgid_may_not_switch_users(monkeypatch: pytest.MonkeyPatch) -> None:
    # The real check reads CapEff from /proc/self/status; here the Worker is made to lack both.
    assert executor_module._can_switch() or not ROOT  # root can always switch
    monkeypatch.setattr(executor_module, "_can_switch", lambda: False)
    policy = TaskPolicy(run_as=frozenset({"nobody"}), run_as_groups=frozenset({"nogroup"}), allow_root_tasks=True)
    assert code(policy, user="nobody") == "plan.switch_not_permitted"
    if os.getegid() != grp.getgrnam("nogroup").gr_gid:
        assert code(policy, group="nogroup") == "plan.switch_not_permitted"


async def test_a_refused_plan_creates_nothing(tmp_path: Path) -> None:
    executor = Executor(tmp_path / "work", policy=AS_ROOT_TOO)
    with pytest.raises(ExecutorRefused, match=r"plan\.user_not_allowed"):
        await executor.spawn(
            offer_id="o1", launch_nonce="n1", argv=["true"], env={}, timeout_ms=None, deadline_at_ms=None,
            run_id="r1", user="nobody",
        )  # fmt: skip
    with pytest.raises(ExecutorRefused, match=r"plan\.cwd_outside"):
        await executor.spawn(
            offer_id="o1", launch_nonce="n1", argv=["true"], env={}, timeout_ms=None, deadline_at_ms=None,
            run_id="r1", cwd="../x",
        )  # fmt: skip
    assert not (tmp_path / "work").exists()


async def test_a_symlink_an_earlier_attempt_left_cannot_lead_the_cwd_out(tmp_path: Path) -> None:
    executor = Executor(tmp_path / "work", policy=AS_ROOT_TOO)
    outside = tmp_path / "outside"
    outside.mkdir()
    executor.run_dir("r1").mkdir(parents=True)
    (executor.run_dir("r1") / "out").symlink_to(outside)
    with pytest.raises(ExecutorRefused, match=r"plan\.cwd_outside"):
        await executor.spawn(
            offer_id="o1", launch_nonce="n1", argv=["true"], env={}, timeout_ms=None, deadline_at_ms=None,
            run_id="r1", cwd="out/deep",
        )  # fmt: skip
    assert list(outside.iterdir()) == [], "something was created outside the Run's directory"
    assert not (tmp_path / "work" / "o1").exists(), "a launch folder exists: something was spawned"
