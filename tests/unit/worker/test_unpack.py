"""Unpacking a task's bundle (worker/qinglong/worker/unpack.py) into its Run's own directory: a packed folder comes
back byte for byte with its modes (as root: given to `nobody`, folders made too), a packed script runs as an argv,
an existing file is replaced (never written through: neither a hard link nor a symlink there is followed), an
existing folder reused. Every attack, as a hand-made archive, is refused with its exact code and leaves nothing: no
byte outside the Run's directory and nothing new inside it (the whole temporary folder is listed before and after):
tar-slip, an absolute path, symlink and hard-link entries, a symlink an earlier task left on the way, devices and
fifos, a file-count bomb, size bombs, a compression bomb, truncated, random and duplicate archives. The caps hold
while writing too, and a failure while placing removes what was made.
Touches: temporary folders (as root: files given to `nobody`); runs a shell script from one.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import os
import pwd
import stat
import subprocess
import tarfile
import zlib
from pathlib import Path

import pytest

from qinglong.wire import bundle
from qinglong.wire.bundle import MAX_ENTRIES, BundleError, pack
from qinglong.worker import unpack as unpack_module
from qinglong.worker.unpack import TEMP_PREFIX, unpack
from tests.support.tarballs import archive, member

ROOT = os.geteuid() == 0
OWNER = (pwd.getpwnam("nobody").pw_uid, pwd.getpwnam("nobody").pw_gid) if ROOT else None
ME = (os.geteuid(), os.getegid())
SCRIPT = b'#!/bin/sh\necho hello "$1"\n'

Listing = dict[str, tuple[object, ...]]


def listing(root: Path) -> Listing:
    """Every entry below `root`, never following a link: its kind, its bytes' SHA-256 or its link's target, its
    mode and its owner."""
    found: Listing = {}
    for folder, folders, files in os.walk(root):
        for name in folders + files:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                what: tuple[object, ...] = ("link", os.readlink(path))
            elif stat.S_ISREG(st.st_mode):
                what = ("file", hashlib.sha256(Path(path).read_bytes()).hexdigest())
            else:
                what = ("dir" if stat.S_ISDIR(st.st_mode) else "other",)
            found[os.path.relpath(path, root)] = (*what, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
    return found


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """The Run's own directory, with a folder outside it holding a file an attack would like to reach."""
    folder = tmp_path / "tasks" / "run"
    folder.mkdir(parents=True, mode=0o700)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "victim").write_bytes(b"not the task's")
    return folder


def refused(data: bytes, run_dir: Path, code: str) -> BundleError:
    """Unpack `data` as an attack: refused with `code`, and the whole temporary folder exactly as it was."""
    top = run_dir.parent.parent
    before = listing(top)
    with pytest.raises(BundleError) as caught:
        unpack(data, run_dir, OWNER)
    assert caught.value.code == code, caught.value
    assert listing(top) == before, "something was written, or left behind"
    return caught.value


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    (src / "bin").mkdir(parents=True)
    (src / "bin" / "hello.sh").write_bytes(SCRIPT)
    (src / "bin" / "hello.sh").chmod(0o700)
    (src / "conf" / "deep" / "er").mkdir(parents=True)
    (src / "conf" / "deep" / "er" / "settings.json").write_bytes(b'{"x": 1}\n')
    (src / "empty").mkdir()
    (src / "ünïcode.txt").write_bytes(bytes(range(256)))
    return src


def test_a_packed_folder_comes_back_with_its_contents_modes_and_owner(source: Path, run_dir: Path) -> None:
    packed = pack(source)
    assert unpack(packed.data, run_dir, OWNER) == tuple(e.path for e in packed.entries)
    owner = OWNER or ME
    got = listing(run_dir)
    assert set(got) == {e.path for e in packed.entries}
    for entry in packed.entries:
        kind, *_, mode, uid, gid = got[entry.path]
        assert (kind, mode, (uid, gid)) == (entry.kind, entry.mode, owner), entry.path
        if entry.kind == "file":
            assert (run_dir / entry.path).read_bytes() == (source / entry.path).read_bytes()
    assert got["bin/hello.sh"][-3] == 0o755 and got["ünïcode.txt"][-3] == 0o644
    assert not [p for p in got if os.path.basename(p).startswith(TEMP_PREFIX)]


def test_a_packed_script_runs_as_an_argv(source: Path, run_dir: Path) -> None:
    unpack(pack(source).data, run_dir, OWNER)
    done = subprocess.run([str(run_dir / "bin" / "hello.sh"), "world"], capture_output=True, check=True)
    assert done.stdout == b"hello world\n"
    single = run_dir / "single"
    single.mkdir()
    assert unpack(pack(source / "bin" / "hello.sh").data, single, OWNER) == ("hello.sh",)
    done = subprocess.run(["./hello.sh", "again"], cwd=single, capture_output=True, check=True)
    assert done.stdout == b"hello again\n"


def test_an_existing_file_is_replaced_never_written_through(source: Path, run_dir: Path, tmp_path: Path) -> None:
    victim, target = tmp_path / "outside" / "victim", tmp_path / "outside" / "target"
    target.write_bytes(b"a symlink's target")
    (run_dir / "bin").mkdir()
    (run_dir / "bin" / "keep").write_bytes(b"the earlier task's own file")
    os.link(victim, run_dir / "bin" / "hello.sh")  # a hard link to a file outside, left by an earlier task
    (run_dir / "ünïcode.txt").symlink_to(target)  # a symlink at a file's name
    for _ in range(2):  # and again over what the first unpack made
        unpack(pack(source).data, run_dir, OWNER)
        assert victim.read_bytes() == b"not the task's" and target.read_bytes() == b"a symlink's target"
        assert (run_dir / "bin" / "hello.sh").read_bytes() == SCRIPT
        assert stat.S_IMODE((run_dir / "bin" / "hello.sh").lstat().st_mode) == 0o755
        assert (run_dir / "ünïcode.txt").is_file() and not (run_dir / "ünïcode.txt").is_symlink()
        assert (run_dir / "bin" / "keep").read_bytes() == b"the earlier task's own file", "a folder is reused"
        assert (run_dir / "bin").stat().st_uid == ME[0], "an existing folder keeps its owner"
    assert os.stat(victim).st_nlink == 1


@pytest.mark.parametrize("path", ["../x", "a/../../x", "a/../b"])
def test_tar_slip_is_refused(run_dir: Path, path: str) -> None:
    refused(archive(member("fine.txt", content=b"ok"), member(path, content=b"escaped")), run_dir, "bundle.path_dotdot")


def test_an_absolute_path_is_refused(run_dir: Path) -> None:
    target = Path("/etc/qinglong-unpack-test-absolute")
    refused(archive(member(str(target), content=b"escaped")), run_dir, "bundle.path_absolute")
    assert not target.exists()


def test_a_symlink_entry_is_refused(run_dir: Path, tmp_path: Path) -> None:
    link = member("conf", tarfile.SYMTYPE, link=str(tmp_path / "outside"))
    refused(archive(link, member("conf/victim", content=b"through the link")), run_dir, "bundle.link")


def test_a_hard_link_entry_is_refused(run_dir: Path, tmp_path: Path) -> None:
    link = member("victim", tarfile.LNKTYPE, link=str(tmp_path / "outside" / "victim"))
    refused(archive(link), run_dir, "bundle.link")


def test_a_symlink_left_on_the_way_is_never_followed(source: Path, run_dir: Path, tmp_path: Path) -> None:
    """The archive is valid; the Run's directory is not: an earlier task left `conf` pointing outside. Files and
    folders before it in the archive were already written, and are removed."""
    (run_dir / "conf").symlink_to(tmp_path / "outside")
    refused(pack(source).data, run_dir, "bundle.path_blocked")
    assert sorted(os.listdir(tmp_path / "outside")) == ["victim"]


@pytest.mark.parametrize(
    ("in_the_way", "data"),
    [
        ("file", archive(member("a/b", content=b"x"))),  # a file where a folder goes
        ("dir", archive(member("z", content=b"x"), member("a", content=b"x"))),  # a folder where a file goes
        ("link", archive(member("a", tarfile.DIRTYPE, mode=0o755))),  # a symlink where a folder goes
    ],
)
def test_something_in_the_way_is_refused(run_dir: Path, tmp_path: Path, in_the_way: str, data: bytes) -> None:
    if in_the_way == "file":
        (run_dir / "a").write_bytes(b"a file")
    elif in_the_way == "dir":
        (run_dir / "a").mkdir()
    else:
        (run_dir / "a").symlink_to(tmp_path / "outside")
    refused(data, run_dir, "bundle.path_blocked")


@pytest.mark.parametrize("kind", [tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.FIFOTYPE])
def test_devices_and_fifos_are_refused(run_dir: Path, kind: bytes) -> None:
    info, _ = member("dev", kind)
    info.devmajor, info.devminor = 1, 3  # /dev/null's numbers
    refused(archive(member("fine.txt", content=b"ok"), (info, b"")), run_dir, "bundle.special_file")


def test_a_file_count_bomb_is_refused(run_dir: Path) -> None:
    data = archive(*[member(f"f{i:05}", content=b"x") for i in range(MAX_ENTRIES + 1)])
    refused(data, run_dir, "bundle.too_many_entries")


def test_a_header_that_claims_little_before_much_data_is_refused(run_dir: Path) -> None:
    info, _ = member("small")
    info.size = 10
    data = info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "surrogateescape") + hashlib.shake_256(b"x").digest(1 << 20)
    refused(gzip.compress(data + bytes(1024)), run_dir, "bundle.corrupt")


def test_a_file_over_the_unpacked_cap_is_refused(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bundle, "MAX_UNPACKED_BYTES", 64 * 1024)
    big = hashlib.shake_256(b"big").digest(64 * 1024 + 1)  # incompressible: the ratio is not what stops it
    data = archive(member("fine.txt", content=b"ok"), member("big", content=big))
    refused(data, run_dir, "bundle.too_large_unpacked")


def test_a_compression_bomb_is_refused(run_dir: Path) -> None:
    """50 MiB of zeros deflate to about 50 KiB: a ratio near 1000, refused before a byte of it is inflated."""
    info, _ = member("zeros")
    info.size = 50 << 20
    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [deflate.compress(info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "surrogateescape"))]
    parts += [deflate.compress(bytes(1 << 20)) for _ in range(50)] + [deflate.compress(bytes(1024)), deflate.flush()]
    data = b"".join(parts)
    assert len(data) * bundle.MAX_RATIO < info.size
    refused(data, run_dir, "bundle.ratio")


def test_a_truncated_archive_is_refused(source: Path, run_dir: Path) -> None:
    data = pack(source).data
    for cut in (len(data) // 2, len(data) - 4, 11):
        refused(data[:cut], run_dir, "bundle.truncated")


def test_random_bytes_are_refused(run_dir: Path) -> None:
    refused(hashlib.shake_256(b"random").digest(64 * 1024), run_dir, "bundle.corrupt")


def test_duplicate_entries_are_refused(run_dir: Path) -> None:
    refused(archive(member("a", content=b"first"), member("a", content=b"second")), run_dir, "bundle.duplicate")
    refused(archive(member("a", content=b"file"), member("a/b", content=b"below")), run_dir, "bundle.duplicate")


def test_the_caps_hold_while_writing_and_what_was_written_goes(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the validation first, the second pass alone refuses, after it wrote: nothing is left."""
    monkeypatch.setattr(unpack_module, "entries", lambda data: ())
    monkeypatch.setattr(bundle, "MAX_UNPACKED_BYTES", 64 * 1024)
    data = archive(
        member("first", content=hashlib.shake_256(b"1").digest(40 * 1024)),
        member("d", tarfile.DIRTYPE, mode=0o755),
        member("d/second", content=hashlib.shake_256(b"2").digest(40 * 1024)),
    )
    refused(data, run_dir, "bundle.too_large_unpacked")
    refused(archive(member("e/x", content=b"1"), member("e/x", content=b"2")), run_dir, "bundle.duplicate")


def test_a_failure_while_placing_removes_what_was_made(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Placing fails at the third file: the new files placed before go, the temporary files and the folder made go;
    the file placed over an existing one stays placed (the module docstring)."""
    (run_dir / "existing").write_bytes(b"old")
    renames = 0
    real_rename = os.rename

    def failing_rename(*args: object, **kwargs: object) -> None:
        nonlocal renames
        renames += 1
        if renames == 3:
            raise OSError(errno.EIO, "disk on fire")
        real_rename(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "rename", failing_rename)
    names = ("existing", "new1", "new2", "sub/new3")
    with pytest.raises(OSError, match="disk on fire"):
        unpack(archive(*[member(n, content=n.encode()) for n in names]), run_dir, OWNER)
    assert sorted(listing(run_dir)) == ["existing"] and (run_dir / "existing").read_bytes() == b"existing"
