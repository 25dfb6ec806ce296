"""Secret files and variables (worker/qinglong/worker/delivery.py, and the Executor's use of them): files made
0600 in the Run's own directory (parents 0700), owned by the task's user when the Worker switches to it, never
through a symlink or out of the directory, nothing left behind by a refusal or a failed spawn; the removal
that ends an Attempt removes what the launch made and nothing else, also from what the journal kept after a
crash; with a store (a launch's folder on a tmpfs) the bytes live there and the path is a symlink to them, and
removal takes both; the store's base must be the Worker's alone; worker.toml's `secret_store` finds /dev/shm and
refuses a folder that is not on a tmpfs; a secret variable is put in the task's environment byte for byte, and
refused where it would override the plan's env or cannot be an environment entry. No value reaches an
exception's message.
Touches: temporary folders, /dev/shm (a folder of its own) and real task processes (as root: files given to
`nobody`).
"""

from __future__ import annotations

import asyncio
import os
import pwd
import stat
import sys
import uuid
from pathlib import Path

import pytest

from qinglong.worker.delivery import (
    TEMP_PREFIX,
    FileDelivery,
    SecretFile,
    SecretFileRefused,
    SecretValues,
    is_tmpfs,
    plan_files,
    remove_files,
    write_files,
)
from qinglong.worker.executor import Executor, ExecutorRefused, TaskPolicy

VALUE = b"s3cr3t-value\x00\xff\n"
NONCE = "0123456789abcdef0123456789abcdef"
ROOT = os.geteuid() == 0
AS_ROOT_TOO = TaskPolicy(allow_root_tasks=True)


def delivery(paths: dict[str, bytes], journaled: list[tuple[SecretFile, ...]] | None = None) -> FileDelivery:
    """The files of `paths` (path → value); `journaled` gets what `identified` was handed."""
    seen = journaled if journaled is not None else []
    return FileDelivery(plan_files(paths, NONCE), paths, seen.append)


def tree(folder: Path) -> dict[str, str]:
    """Every entry below `folder` (relative path → 'dir', 'link' or the file's bytes as hex)."""
    found: dict[str, str] = {}
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        found[rel] = "link" if path.is_symlink() else "dir" if path.is_dir() else path.read_bytes().hex()
    return found


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "tasks" / "run"
    folder.mkdir(parents=True, mode=0o700)
    return folder


def test_files_are_made_0600_in_0700_folders_and_journaled_before_any_value(run_dir: Path) -> None:
    journaled: list[tuple[SecretFile, ...]] = []
    sizes: list[list[int]] = []

    def identified(files: tuple[SecretFile, ...]) -> None:
        journaled.append(files)
        sizes.append([os.stat(run_dir / f.temp).st_size for f in files])  # what exists when the journal is told

    paths = {"token": VALUE, "conf/deep/key.pem": b"other value"}
    made = write_files(run_dir, FileDelivery(plan_files(paths, NONCE), paths, identified), None)

    assert journaled == [made] and sizes == [[0, 0]], "identities journaled while the files held no value"
    assert all(f.dev is not None and f.ino is not None for f in made)
    assert (run_dir / "token").read_bytes() == VALUE
    assert (run_dir / "conf/deep/key.pem").read_bytes() == b"other value"
    for path in (run_dir / "token", run_dir / "conf/deep/key.pem"):
        assert stat.S_IMODE(path.lstat().st_mode) == 0o600 and path.lstat().st_nlink == 1
        assert (path.stat().st_dev, path.stat().st_ino) in {(f.dev, f.ino) for f in made}
    for folder in (run_dir / "conf", run_dir / "conf/deep"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert not [p for p in os.listdir(run_dir) if p.startswith(TEMP_PREFIX)], "a temporary name is left"


@pytest.mark.skipif(not ROOT, reason="giving a file to another user needs root")
def test_files_and_the_folders_made_for_them_belong_to_the_task_s_user(run_dir: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    owner = (nobody.pw_uid, nobody.pw_gid)
    (run_dir / "existing").mkdir(mode=0o755)  # a folder already there keeps its owner
    write_files(run_dir, delivery({"a/b/token": VALUE, "existing/key": VALUE}), owner)
    for path in (run_dir / "a", run_dir / "a/b", run_dir / "a/b/token", run_dir / "existing/key"):
        assert (path.stat().st_uid, path.stat().st_gid) == owner, path
    assert (run_dir / "existing").stat().st_uid == os.geteuid()


@pytest.mark.parametrize("path", ["../escape", "/etc/passwd", "a/../../b", ".", "a/./b", "", "a//b", "a/b/"])
def test_a_path_that_is_not_relative_inside_the_directory_is_refused(run_dir: Path, path: str) -> None:
    with pytest.raises(SecretFileRefused) as refused:
        write_files(run_dir, delivery({path: VALUE}), None)
    assert VALUE.decode("latin-1") not in str(refused.value)
    assert tree(run_dir.parent) == {"run": "dir"}, "something was made"


def test_a_symlink_on_the_way_is_never_followed_and_nothing_is_left(run_dir: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (run_dir / "conf").symlink_to(outside)  # an earlier Attempt's task left it
    with pytest.raises(SecretFileRefused):
        write_files(run_dir, delivery({"a-first": VALUE, "conf/token": VALUE}), None)
    assert list(outside.iterdir()) == [], "a file was written through the symlink"
    assert tree(run_dir) == {"conf": "link"}, "the refusal left something behind"


def test_a_symlink_or_a_file_at_the_name_is_refused_and_kept(run_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"not yours")
    (run_dir / "token").symlink_to(target)
    (run_dir / "taken").write_bytes(b"the task's own file")
    (run_dir / "file").write_bytes(b"a file, not a folder")
    for path in ("token", "taken", "file/token"):
        with pytest.raises(SecretFileRefused):
            write_files(run_dir, delivery({path: VALUE}), None)
    assert target.read_bytes() == b"not yours" and (run_dir / "token").is_symlink()
    assert (run_dir / "taken").read_bytes() == b"the task's own file"
    assert sorted(os.listdir(run_dir)) == ["file", "taken", "token"]


def test_a_failure_to_journal_leaves_nothing(run_dir: Path) -> None:
    def identified(files: tuple[SecretFile, ...]) -> None:
        raise OSError("journal full")

    paths = {"token": VALUE}
    with pytest.raises(OSError, match="journal full"):
        write_files(run_dir, FileDelivery(plan_files(paths, NONCE), paths, identified), None)
    assert os.listdir(run_dir) == []


def test_removal_removes_what_the_launch_made_and_nothing_else(run_dir: Path) -> None:
    made = write_files(run_dir, delivery({"a": VALUE, "b": VALUE, "sub/c": VALUE, "d": VALUE}), None)
    by_path = {f.path: f for f in made}
    (run_dir / "b.new").write_bytes(b"the task replaced it")
    (run_dir / "b.new").rename(run_dir / "b")  # as tools replace a file: another inode, the task's own now
    (run_dir / "d").unlink()  # the task removed it itself
    (run_dir / "mine").write_bytes(b"the task's output")
    assert remove_files(str(run_dir), made) == ()
    assert tree(run_dir) == {"b": b"the task replaced it".hex(), "mine": b"the task's output".hex(), "sub": "dir"}
    assert remove_files(str(run_dir), [by_path["a"]]) == (), "a second removal is a no-op"


def test_removal_after_a_crash_uses_only_what_was_journaled(run_dir: Path, tmp_path: Path) -> None:
    """Crash between the temporary files and their identities: the temporary names are ours by the nonce; the
    path was never linked, so a file there (someone else's) stays. Crash after linking: the identity decides."""
    never_linked = SecretFile("conf/token", f"{TEMP_PREFIX}{NONCE}-0")
    (run_dir / never_linked.temp).write_bytes(b"")
    (run_dir / "conf").mkdir()
    (run_dir / "conf/token").write_bytes(b"not made by this launch")
    linked = write_files(run_dir, FileDelivery(plan_files({"x": VALUE}, "f" * 32), {"x": VALUE}, lambda f: None), None)
    os.link(run_dir / "x", run_dir / linked[0].temp)  # as if the crash came before the temporary name went
    assert remove_files(str(run_dir), [never_linked, *linked]) == ()
    assert tree(run_dir) == {"conf": "dir", "conf/token": b"not made by this launch".hex()}


def test_removal_never_follows_a_symlink_and_survives_a_missing_directory(run_dir: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    made = write_files(run_dir, delivery({"conf/token": VALUE}), None)
    os.rename(run_dir / "conf", outside / "conf")  # the task moved the folder away and left a symlink
    (run_dir / "conf").symlink_to(outside / "conf")
    assert remove_files(str(run_dir), made) == ()
    assert (outside / "conf/token").read_bytes() == VALUE, "removed through a symlink"
    assert remove_files(str(tmp_path / "gone"), made) == ()
    assert remove_files(None, made) == ()


def test_values_are_never_shown() -> None:
    values = SecretValues()
    values.put("offer", [VALUE])
    assert VALUE.decode("latin-1") not in repr(values) and "s3cr3t" not in repr(values)
    made = delivery({"token": VALUE})
    assert "s3cr3t" not in repr(made)


def test_a_journaled_file_record_is_strict() -> None:
    f = SecretFile("a/b", f"{TEMP_PREFIX}{NONCE}-0", 1, 2)
    assert SecretFile.from_dict(f.to_dict()) == f
    for bad in ({**f.to_dict(), "value": "x"}, {**f.to_dict(), "temp": "../x"}, {**f.to_dict(), "dev": None}):
        with pytest.raises(ValueError):
            SecretFile.from_dict(bad)


# -- the Executor ----------------------------------------------------------------------------------------------


async def spawn(executor: Executor, argv: list[str], **kwargs: object) -> tuple[str, bytes, bytes]:
    """Run `argv` to its end under the Executor; its run id, stdout and stderr."""
    run_id = str(uuid.uuid4())
    handle = await executor.spawn(
        offer_id=str(uuid.uuid4()), launch_nonce=uuid.uuid4().hex, argv=argv, env={"PATH": os.defpath},
        timeout_ms=None, deadline_at_ms=None, run_id=run_id, **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip
    for _ in range(500):
        if executor.exit_status(handle) is not None:
            break
        await asyncio.sleep(0.02)
    assert executor.exit_status(handle) is not None
    out, err = (executor.read_output(handle, stream, 0, 1 << 20)[1] for stream in ("stdout", "stderr"))
    return run_id, out, err


PRINT = (
    "import os, sys; sys.stdout.buffer.write(os.environb[b'TOKEN']); sys.stdout.buffer.write(open('t', 'rb').read())"
)


async def test_a_task_gets_its_secret_variable_byte_for_byte_and_its_file(tmp_path: Path) -> None:
    executor = Executor(tmp_path / "w", policy=AS_ROOT_TOO)
    value = b"env \xff\xfe value"
    paths = {"t": b"file value"}
    run_id, out, err = await spawn(
        executor, [sys.executable, "-c", PRINT], secret_env={"TOKEN": value},
        secret_files=FileDelivery(plan_files(paths, NONCE), paths, lambda f: None),
    )  # fmt: skip
    assert (out, err) == (value + b"file value", b"")
    assert (executor.run_dir(run_id) / "t").read_bytes() == b"file value"


@pytest.mark.skipif(not ROOT, reason="switching to another user needs root")
async def test_a_task_as_nobody_reads_its_file_which_nobody_else_can(tmp_path: Path) -> None:
    executor = Executor(tmp_path / "w", policy=TaskPolicy(run_as=frozenset({"nobody"})))
    paths = {"keys/t": b"for nobody only"}
    run_id, out, err = await spawn(
        executor, ["sh", "-c", "id -u; cat keys/t"], user="nobody",
        secret_files=FileDelivery(plan_files(paths, NONCE), paths, lambda f: None),
    )  # fmt: skip
    nobody = pwd.getpwnam("nobody")
    assert (out, err) == (f"{nobody.pw_uid}\nfor nobody only".encode(), b"")
    secret = executor.run_dir(run_id) / "keys/t"
    assert (secret.stat().st_uid, secret.stat().st_gid, stat.S_IMODE(secret.stat().st_mode)) == (
        nobody.pw_uid,
        nobody.pw_gid,
        0o600,
    )


@pytest.mark.parametrize(
    ("env", "secret_env"),
    [
        ({"TOKEN": "plain"}, {"TOKEN": VALUE.replace(b"\x00", b"")}),  # would override the plan's env
        ({}, {"TOKEN": VALUE}),  # a NUL byte cannot be in an environment
        ({}, {"QINGLONG_DEADLINE_AT_MS": b"1234"}),  # the Worker's own variable
        ({}, {"BAD=NAME": b"1234"}),
    ],
)
async def test_a_secret_variable_that_cannot_be_given_is_refused_before_anything_is_made(
    tmp_path: Path, env: dict[str, str], secret_env: dict[str, bytes]
) -> None:
    executor = Executor(tmp_path / "w", policy=AS_ROOT_TOO)
    with pytest.raises(ExecutorRefused) as refused:
        await executor.spawn(
            offer_id="o", launch_nonce="n", argv=["true"], env=env, timeout_ms=None, deadline_at_ms=None,
            run_id="r", secret_env=secret_env,
        )  # fmt: skip
    assert refused.value.code == "secret_env_refused"
    assert "s3cr3t" not in str(refused.value) and "1234" not in str(refused.value)
    assert not (tmp_path / "w").exists()


async def test_a_refused_file_is_a_typed_refusal_and_spawns_nothing(tmp_path: Path) -> None:
    executor = Executor(tmp_path / "w", policy=AS_ROOT_TOO)
    run_dir = executor.run_dir("r")
    run_dir.mkdir(parents=True)
    (run_dir / "conf").symlink_to(tmp_path)
    paths = {"a": VALUE, "conf/t": VALUE}
    with pytest.raises(ExecutorRefused) as refused:
        await executor.spawn(
            offer_id="o", launch_nonce="n", argv=["true"], env={}, timeout_ms=None, deadline_at_ms=None,
            run_id="r", secret_files=FileDelivery(plan_files(paths, NONCE), paths, lambda f: None),
        )  # fmt: skip
    assert refused.value.code == "secret_file_refused" and "s3cr3t" not in str(refused.value)
    assert sorted(os.listdir(run_dir)) == ["conf"], "a file was left"
    assert not (tmp_path / "w" / "o").exists(), "a launch folder exists: something was spawned"


async def test_a_spawn_that_fails_after_the_files_were_made_removes_them(tmp_path: Path) -> None:
    executor = Executor(tmp_path / "w", policy=AS_ROOT_TOO)
    paths = {"t": VALUE}
    log, _ = executor.paths("o", "n")
    log.parent.mkdir(parents=True)
    log.write_bytes(b"")  # this launch nonce was spawned already
    with pytest.raises(ExecutorRefused) as refused:
        await executor.spawn(
            offer_id="o", launch_nonce="n", argv=["true"], env={}, timeout_ms=None, deadline_at_ms=None,
            run_id="r", secret_files=FileDelivery(plan_files(paths, NONCE), paths, lambda f: None),
        )  # fmt: skip
    assert refused.value.code == "launch.duplicate"
    assert os.listdir(executor.run_dir("r")) == []


# --- a store: the bytes on a tmpfs, a symlink at the path --------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A launch's store folder (its base made here 0711 as the Worker's own; write_files makes the folder)."""
    base = tmp_path / "shm" / "qinglong-worker"
    base.mkdir(parents=True, mode=0o711)
    return base / NONCE


def test_with_a_store_the_bytes_live_there_and_the_path_is_a_symlink_to_them(run_dir: Path, store: Path) -> None:
    journaled: list[tuple[SecretFile, ...]] = []
    made = write_files(run_dir, delivery({"token": VALUE, "conf/key": b"other"}, journaled), None, store)
    assert journaled == [made]
    assert tree(run_dir) == {"conf": "dir", "conf/key": "link", "token": "link"}
    assert (run_dir / "token").read_bytes() == VALUE and (run_dir / "conf/key").read_bytes() == b"other"
    assert sorted(os.listdir(store)) == sorted(f.temp for f in made), "the store holds exactly the launch's files"
    assert stat.S_IMODE(store.stat().st_mode) == 0o700
    for f in made:
        st = (store / f.temp).lstat()
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
        assert (st.st_dev, st.st_ino) == (f.dev, f.ino)
        assert os.readlink(run_dir / f.path) == str(store / f.temp)
    (run_dir / "mine").write_bytes(b"the task's output")
    assert remove_files(str(run_dir), made, str(store)) == ()
    assert tree(run_dir) == {"conf": "dir", "mine": b"the task's output".hex()}
    assert not store.exists(), "the store folder went with its files"


def test_with_a_store_removal_takes_only_our_symlinks_and_survives_a_reboot(run_dir: Path, store: Path) -> None:
    made = write_files(run_dir, delivery({"a": VALUE, "b": VALUE, "c": VALUE}), None, store)
    (run_dir / "b").unlink()
    (run_dir / "b").symlink_to(run_dir / "elsewhere")  # the task's own symlink at our path
    (run_dir / "c").unlink()
    (run_dir / "c").write_bytes(b"the task's file")
    assert remove_files(str(run_dir), made, str(store)) == ()
    assert tree(run_dir) == {"b": "link", "c": b"the task's file".hex()} and not store.exists()
    made = write_files(run_dir, delivery({"d": VALUE}), None, store)
    for f in made:
        (store / f.temp).unlink()
    store.rmdir()  # a reboot empties a tmpfs: the journal still names the files
    assert remove_files(str(run_dir), made, str(store)) == ()
    assert "d" not in os.listdir(run_dir), "a dangling symlink of ours was left"


def test_with_a_store_a_refusal_or_a_journal_failure_leaves_nothing(run_dir: Path, store: Path) -> None:
    (run_dir / "taken").write_bytes(b"the task's own file")
    with pytest.raises(SecretFileRefused):
        write_files(run_dir, delivery({"a": VALUE, "taken": VALUE}), None, store)
    assert tree(run_dir) == {"taken": b"the task's own file".hex()} and not store.exists()

    def identified(files: tuple[SecretFile, ...]) -> None:
        raise OSError("journal full")

    with pytest.raises(OSError, match="journal full"):
        write_files(run_dir, FileDelivery(plan_files({"a": VALUE}, NONCE), {"a": VALUE}, identified), None, store)
    assert not store.exists()


@pytest.mark.parametrize("kind", ["symlink", "open to others"])
def test_a_store_base_that_is_not_the_worker_s_alone_is_refused(run_dir: Path, tmp_path: Path, kind: str) -> None:
    base = tmp_path / "shm" / "squatted"
    base.parent.mkdir()
    if kind == "symlink":
        (tmp_path / "theirs").mkdir()
        base.symlink_to(tmp_path / "theirs")
    else:
        base.mkdir()
        base.chmod(0o777)
    with pytest.raises(SecretFileRefused, match="not a folder of this Worker"):
        write_files(run_dir, delivery({"a": VALUE}), None, base / NONCE)
    assert os.listdir(run_dir) == [] and not (tmp_path / "theirs" / NONCE).exists()


def test_is_tmpfs_reads_the_mount_table(tmp_path: Path) -> None:
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        points = [line.split()[1] for line in mounts if line.split()[2] == "tmpfs"]
    assert points, "this machine has no tmpfs mounted"
    assert is_tmpfs(Path(points[0])) and is_tmpfs(Path(points[0]) / "not-yet-made")
    assert not is_tmpfs(Path("/proc")), "procfs is not a tmpfs"
