"""worker.toml is read exactly: unknown keys, missing keys and wrong types are one-line ConfigErrors
naming the key, never silently ignored or coerced; `secret_store` is a folder on a tmpfs (by default one of
this Worker's own in /dev/shm), or "off". Touches: files under tmp_path; reads the mount table."""

from __future__ import annotations

from pathlib import Path

import pytest

from qinglong.worker.delivery import SHM, is_tmpfs
from qinglong.worker.executor import TaskPolicy
from qinglong.worker.run import ConfigError, load

GOOD = """origin = "https://control.example:8443"
worker_id = "a0000000-0000-4000-8000-000000000001"
generation = 1
certificate = "worker.crt"
key = "worker.key"
trust_anchors = "ca.crt"
journal = "state/inbox.sqlite"
work_dir = "state/runs"
require_signed_plans = false
"""


def test_a_minimal_file_gets_the_documented_defaults(tmp_path: Path) -> None:
    path = tmp_path / "worker.toml"
    path.write_text(GOOD + "tick_seconds = 1\n")
    config = load(path)
    assert (config.capacity, config.tick_seconds, config.page_size) == (1, 1.0, 16)
    assert (config.shutdown_seconds, config.stop_grace_seconds) == (20.0, 5.0)
    assert config.journal == tmp_path / "state/inbox.sqlite"
    assert config.task_policy == TaskPolicy()  # no switch, no absolute cwd, no task as root


def test_the_task_policy_keys(tmp_path: Path) -> None:
    path = tmp_path / "worker.toml"
    extra = ('run_as = ["nobody", "builder"]', 'run_as_groups = ["nogroup"]', "allow_absolute_cwd = true")
    path.write_text(GOOD + "\n".join((*extra, "allow_root_tasks = true\n")))
    assert load(path).task_policy == TaskPolicy(
        run_as=frozenset({"nobody", "builder"}),
        run_as_groups=frozenset({"nogroup"}),
        allow_absolute_cwd=True,
        allow_root_tasks=True,
    )


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ("tick_secnds = 7\n", "worker.toml: unknown field 'tick_secnds'"),
        ('tick_seconds = "7"\n', "worker.toml.tick_seconds: expected a number of seconds"),
        ("tick_seconds = 0.0\n", "worker.toml.tick_seconds: outside 0.05..3600 seconds"),
        ("capacity = true\n", "worker.toml.capacity: expected an integer"),
        ("capacity = 2.0\n", "worker.toml.capacity: expected an integer"),
        ("page_size = 65\n", "worker.toml.page_size: outside 1..64"),
        ('run_as = "nobody"\n', "worker.toml.run_as: expected an array"),
        ("run_as = [1000]\n", "worker.toml.run_as[0]: expected a string"),
        ('run_as_groups = ["Wheel"]\n', "worker.toml.run_as_groups[0]: does not match [a-z_][a-z0-9_-]{0,31}"),
        ('allow_root_tasks = "yes"\n', "worker.toml.allow_root_tasks: expected a boolean"),
    ],
)
def test_a_bad_setting_is_one_line_naming_it(tmp_path: Path, extra: str, says: str) -> None:
    path = tmp_path / "worker.toml"
    path.write_text(GOOD + extra)
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert str(caught.value) == says


def test_a_missing_setting_is_named(tmp_path: Path) -> None:
    path = tmp_path / "worker.toml"
    path.write_text(GOOD.replace('worker_id = "a0000000-0000-4000-8000-000000000001"\n', ""))
    with pytest.raises(ConfigError, match=r"^worker.toml.worker_id: missing$"):
        load(path)


@pytest.mark.skipif(not is_tmpfs(SHM), reason="this machine has no tmpfs at /dev/shm")
def test_the_secret_store_is_a_folder_of_this_worker_on_a_tmpfs_or_off(tmp_path: Path) -> None:
    path = tmp_path / "worker.toml"
    path.write_text(GOOD)
    auto = load(path).secret_store
    assert auto is not None and auto.parent == SHM and auto.name.startswith("qinglong-worker-")
    other = tmp_path / "other" / "worker.toml"
    other.parent.mkdir()
    other.write_text(GOOD)
    assert load(other).secret_store != auto, "two Workers (two work_dirs) share a store"
    path.write_text(GOOD + 'secret_store = "off"\n')
    assert load(path).secret_store is None
    path.write_text(GOOD + f'secret_store = "{SHM / "mine"}"\n')
    assert load(path).secret_store == SHM / "mine"
    path.write_text(GOOD + 'secret_store = "state/secrets"\n')
    with pytest.raises(ConfigError, match=r"^secret_store: .*state/secrets is not on a tmpfs"):
        load(path)


def test_plans_must_be_signed_unless_the_file_says_otherwise(tmp_path: Path) -> None:
    (tmp_path / "minimal.toml").write_text(GOOD)
    path = tmp_path / "worker.toml"
    path.write_text(GOOD.replace("require_signed_plans = false\n", ""))
    with pytest.raises(ConfigError, match=r"^trusted_plan_keys: .*require_signed_plans = false"):
        load(path)
    path.write_text(GOOD + "bundle_cache_mib = 64\nbundle_fetch_seconds = 30\n")
    config = load(path)
    assert (config.trust.required, config.trust.keys, config.bundle_cache_bytes) == (False, {}, 64 << 20)
    assert config.bundle_fetch_seconds == 30.0 and load(path.with_name("minimal.toml")).bundle_fetch_seconds == 600.0
