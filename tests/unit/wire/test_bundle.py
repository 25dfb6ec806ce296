"""Task bundles (qinglong.wire.bundle): `pack` makes the same bytes from the same tree whatever its mtimes, owners and
other mode bits, in the documented format (gzip level 9 without a name or time, a sorted pax tar of files 0644 or
0755 and folders 0755, owners and times zeroed); it refuses symlinks and special files in the source (never
following one), paths a bundle may not hold, and results over the caps. `entries` lists an archive without
unpacking it and refuses every hand-made archive that breaks a rule, with the rule's stable code and a one-line
message that shows no contents; a foreign archive that keeps the rules is accepted. (Unpacking, and the attacks on
it: tests/unit/worker/test_unpack.py.)
Touches: temporary folders (as root: files given to `nobody`).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import pwd
import re
import shutil
import socket
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from qinglong.wire import bundle
from qinglong.wire.bundle import BUNDLE_CODES, BundleError, Entry, entries, members, pack
from qinglong.wire.common import ERROR_CODE_PATTERN
from tests.support.tarballs import archive, member, raw_tar

ROOT = os.geteuid() == 0
MARKER = b"CONTENT-MARKER-never-in-a-message"


def noise(seed: bytes, size: int) -> bytes:
    """`size` incompressible bytes, the same for the same seed."""
    return hashlib.shake_256(seed).digest(size)


def refused(data: bytes) -> BundleError:
    """The refusal of `data` by `entries`, checked to be one line with a known code and no contents."""
    with pytest.raises(BundleError) as caught:
        entries(data)
    error = caught.value
    assert error.code in BUNDLE_CODES and str(error).startswith(error.code + ": ")
    assert "\n" not in str(error) and MARKER.decode() not in str(error)
    return error


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A small source folder: a script, a data file, nested folders, an empty one, long and non-ASCII names."""
    src = tmp_path / "src"
    (src / "bin").mkdir(parents=True)
    (src / "bin/run.sh").write_bytes(b"#!/bin/sh\necho hello\n")
    (src / "bin/run.sh").chmod(0o700)
    (src / "data.json").write_bytes(b'{"a": 1}\n')
    (src / "data.json").chmod(0o600)
    (src / "empty").mkdir(mode=0o700)
    deep = src / "lib" / ("x" * 90) / "ünïcode"
    deep.mkdir(parents=True)
    (deep / ("long-name-" * 12 + ".py")).write_bytes(b"print('deep')\n")
    (src / "a-b").write_bytes(b"sorts between a and a/...")
    return src


def test_packing_the_same_tree_gives_the_same_bytes(tree: Path, tmp_path: Path) -> None:
    first = pack(tree)
    for path in [tree, *tree.rglob("*")]:
        os.utime(path, (1_000_000_000, 1_000_000_000), follow_symlinks=False)
        if ROOT:
            nobody = pwd.getpwnam("nobody")
            os.chown(path, nobody.pw_uid, nobody.pw_gid, follow_symlinks=False)
        if path.is_file():
            path.chmod(0o744 if path.stat().st_mode & 0o100 else 0o640)  # other bits, same execute-or-not
        else:
            path.chmod(0o750)
    copy = tmp_path / "elsewhere" / "copy"
    shutil.copytree(tree, copy)
    for again in (pack(tree), pack(copy)):
        assert again.data == first.data and again.digest == first.digest and again.entries == first.entries
    assert re.fullmatch("[0-9a-f]{64}", first.digest)
    assert "data=" not in repr(first), "the bytes are not in the repr"


def test_the_format_is_the_documented_one(tree: Path) -> None:
    packed = pack(tree)
    header = packed.data[:10]
    assert header[:4] == b"\x1f\x8b\x08\x00", "gzip, deflate, no flags: no file name"
    assert header[4:8] == b"\0\0\0\0" and header[8] == 2, "mtime 0, maximum compression"
    paths = [e.path for e in packed.entries]
    assert paths == sorted(paths, key=lambda p: p.encode()) and paths[:3] == ["a-b", "bin", "bin/run.sh"]
    with tarfile.open(fileobj=io.BytesIO(packed.data), mode="r:gz") as tar:
        found = tar.getmembers()
    assert [m.name for m in found] == paths
    for m in found:
        assert (m.mtime, m.uid, m.gid, m.uname, m.gname) == (0, 0, 0, "", "")
        assert m.type in (tarfile.REGTYPE, tarfile.DIRTYPE) and not m.name.startswith(("./", "/"))
        assert set(m.pax_headers) <= {"path"}, "a pax header holds a long or non-ASCII path only"
    assert {m.name for m in found if m.pax_headers} == {p for p in paths if len(p) > 100 or not p.isascii()}


def test_modes_are_0644_or_0755_for_files_and_0755_for_folders(tree: Path) -> None:
    (tree / "setuid").write_bytes(b"x")
    (tree / "setuid").chmod(0o4711)
    (tree / "group-exec").write_bytes(b"x")
    (tree / "group-exec").chmod(0o610)
    (tree / "private").write_bytes(b"x")
    (tree / "private").chmod(0o400)
    modes = {e.path: (e.kind, e.mode) for e in pack(tree).entries}
    assert modes["bin/run.sh"] == modes["setuid"] == modes["group-exec"] == ("file", 0o755)
    assert modes["data.json"] == modes["private"] == ("file", 0o644)
    assert modes["empty"] == modes["bin"] == ("dir", 0o755)


def test_a_single_file_packs_as_one_entry_by_its_base_name(tree: Path) -> None:
    packed = pack(tree / "bin" / "run.sh")
    assert packed.entries == (Entry("run.sh", "file", 21, 0o755),)
    assert [(e, b"".join(chunks)) for e, chunks in members(packed.data)] == [
        (packed.entries[0], b"#!/bin/sh\necho hello\n")
    ]


def _symlink_to_file(src: Path) -> None:
    (src / "link").symlink_to(src / "data.json")


def _symlink_to_folder(src: Path) -> None:
    (src / "bin" / "up").symlink_to(src.parent)


def _dangling_symlink(src: Path) -> None:
    (src / "lib" / "gone").symlink_to("/nonexistent/target")


def _fifo(src: Path) -> None:
    os.mkfifo(src / "bin" / "pipe")


def _socket(src: Path) -> None:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(src / "sock"))
    server.close()


@pytest.mark.parametrize(
    ("make", "code"),
    [
        (_symlink_to_file, "bundle.source_link"),
        (_symlink_to_folder, "bundle.source_link"),
        (_dangling_symlink, "bundle.source_link"),
        (_fifo, "bundle.source_special"),
        (_socket, "bundle.source_special"),
    ],
)
def test_links_and_special_files_in_the_source_are_refused(tree: Path, make: Callable[[Path], None], code: str) -> None:
    make(tree)
    with pytest.raises(BundleError) as caught:
        pack(tree)
    assert caught.value.code == code


def test_a_source_that_is_a_symlink_or_missing_is_refused(tree: Path, tmp_path: Path) -> None:
    (tmp_path / "link-to-src").symlink_to(tree)
    (tmp_path / "link-to-file").symlink_to(tree / "data.json")
    for source, code in [
        (tmp_path / "link-to-src", "bundle.source_link"),
        (tmp_path / "link-to-file", "bundle.source_link"),
        (tmp_path / "missing", "bundle.source_missing"),
    ]:
        with pytest.raises(BundleError) as caught:
            pack(source)
        assert caught.value.code == code, source


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("back\\slash", "bundle.path_invalid"),
        ("new\nline", "bundle.path_invalid"),
        ("esc\x1b[31m", "bundle.path_invalid"),
    ],
)
def test_source_names_obey_the_path_rules(tree: Path, name: str, code: str) -> None:
    (tree / "lib" / name).write_bytes(b"x")
    with pytest.raises(BundleError) as caught:
        pack(tree)
    assert caught.value.code == code and "\n" not in str(caught.value)


def test_a_source_name_that_is_not_utf8_is_refused(tree: Path) -> None:
    os.mkdir(os.fsencode(tree) + b"/caf\xe9")
    with pytest.raises(BundleError) as caught:
        pack(tree)
    assert caught.value.code == "bundle.path_invalid"


def test_source_paths_too_long_or_too_deep_are_refused(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bundle, "MAX_DEPTH", 3)
    with pytest.raises(BundleError) as caught:
        pack(tree)
    assert caught.value.code == "bundle.path_too_deep"
    monkeypatch.setattr(bundle, "MAX_DEPTH", 32)
    monkeypatch.setattr(bundle, "MAX_PATH_CHARS", 40)
    with pytest.raises(BundleError) as caught:
        pack(tree)
    assert caught.value.code == "bundle.path_too_long"


def test_the_caps_hold_for_packing(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tree / "noise").write_bytes(noise(b"7", 64 * 1024))
    with pytest.raises(BundleError) as caught:
        pack(tree, max_bytes=32 * 1024)
    assert caught.value.code == "bundle.too_large"
    assert len(pack(tree, max_bytes=80 * 1024).data) <= 80 * 1024
    with monkeypatch.context() as patch:
        patch.setattr(bundle, "MAX_ENTRIES", 5)
        with pytest.raises(BundleError) as caught:
            pack(tree)
        assert caught.value.code == "bundle.too_many_entries"
    with monkeypatch.context() as patch:
        patch.setattr(bundle, "MAX_UNPACKED_BYTES", 60 * 1024)
        with pytest.raises(BundleError) as caught:
            pack(tree)
        assert caught.value.code == "bundle.too_large_unpacked"
    (tree / "noise").write_bytes(bytes(4 * 1024 * 1024))  # zeros: below the floor any ratio is fine
    assert pack(tree).entries
    monkeypatch.setattr(bundle, "RATIO_FLOOR_BYTES", 1024 * 1024)  # above it, the archive is refused for its ratio
    with pytest.raises(BundleError) as caught:
        pack(tree)
    assert caught.value.code == "bundle.ratio"


def test_entries_lists_an_archive_without_unpacking_it(tree: Path, tmp_path: Path) -> None:
    packed = pack(tree)
    before = sorted(os.listdir(tmp_path))
    listed = entries(packed.data)
    assert listed == packed.entries and sorted(os.listdir(tmp_path)) == before
    by_path = {e.path: e for e in listed}
    assert by_path["bin/run.sh"] == Entry("bin/run.sh", "file", 21, 0o755)
    assert by_path["empty"] == Entry("empty", "dir", 0, 0o755)
    contents = {e.path: b"".join(chunks) for e, chunks in members(packed.data) if e.kind == "file"}
    assert contents["data.json"] == b'{"a": 1}\n' and len(contents) == 4


def test_a_foreign_archive_that_keeps_the_rules_is_accepted() -> None:
    """Implied folders, any order, ustar or GNU headers, trailing zero blocks: all fine."""
    members_ = (
        member("z/b.txt", content=b"b"),
        member("a.sh", content=b"a", mode=0o755),
        member("z", tarfile.DIRTYPE, mode=0o755),
    )
    for fmt in (tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT):
        assert [e.path for e in entries(archive(*members_, fmt=fmt))] == ["z/b.txt", "a.sh", "z"]
    padded = gzip.compress(raw_tar(member("a", content=b"a")) + bytes(64 * 1024))
    assert entries(padded) == (Entry("a", "file", 1, 0o644),)


def _long_gnu_name() -> bytes:
    return archive(member("n" * 150, content=MARKER), fmt=tarfile.GNU_FORMAT)


def _raw_after_end() -> bytes:
    return gzip.compress(raw_tar(member("a", content=MARKER)) + b"\x01")


def _small_header_big_data() -> bytes:
    info, _ = member("a")
    info.size = 10
    head = info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "surrogateescape")
    return gzip.compress(head + noise(b"1", 1024 * 1024) + bytes(1024))


def _tar_cut_inside_a_file() -> bytes:
    return gzip.compress(raw_tar(member("a", content=MARKER * 100))[:1024])


def _no_end_blocks() -> bytes:
    return gzip.compress(raw_tar(member("a", content=MARKER))[:1024])


def _bad_crc() -> bytes:
    data = bytearray(archive(member("a", content=MARKER)))
    data[-8] ^= 0xFF
    return bytes(data)


def _non_utf8_name() -> bytes:
    raw = raw_tar(member("caf\udce9"), fmt=tarfile.USTAR_FORMAT, errors="surrogateescape")
    return gzip.compress(raw)


CRAFTED: dict[str, tuple[Callable[[], bytes], str]] = {
    "absolute": (lambda: archive(member("/etc/x", content=MARKER)), "bundle.path_absolute"),
    "dotdot": (lambda: archive(member("../x", content=MARKER)), "bundle.path_dotdot"),
    "dotdot inside": (lambda: archive(member("a/../../x")), "bundle.path_dotdot"),
    "dot": (lambda: archive(member("./a")), "bundle.path_invalid"),
    "empty segment": (lambda: archive(member("a//b")), "bundle.path_invalid"),
    "backslash": (lambda: archive(member("a\\b")), "bundle.path_invalid"),
    "control character": (lambda: archive(member("a\x1b]0;x\x07")), "bundle.path_invalid"),
    "not utf-8": (_non_utf8_name, "bundle.path_invalid"),
    "too long": (lambda: archive(member("p" * 1025)), "bundle.path_too_long"),
    "too deep": (lambda: archive(member("/".join("d" * 33))), "bundle.path_too_deep"),
    "symlink": (lambda: archive(member("a", tarfile.SYMTYPE, link="/etc/passwd")), "bundle.link"),
    "hard link": (lambda: archive(member("a", tarfile.LNKTYPE, link="/etc/passwd")), "bundle.link"),
    "char device": (lambda: archive(member("a", tarfile.CHRTYPE)), "bundle.special_file"),
    "block device": (lambda: archive(member("a", tarfile.BLKTYPE)), "bundle.special_file"),
    "fifo": (lambda: archive(member("a", tarfile.FIFOTYPE)), "bundle.special_file"),
    "contiguous": (lambda: archive(member("a", tarfile.CONTTYPE)), "bundle.special_file"),
    "gnu long name": (_long_gnu_name, "bundle.special_file"),
    "global pax header": (lambda: archive(member("a"), pax_headers={"comment": "x"}), "bundle.special_file"),
    "sparse pax": (lambda: archive(member("a", pax={"GNU.sparse.major": "1"})), "bundle.special_file"),
    "huge pax header": (lambda: archive(member("a", pax={"comment": "c" * 9000})), "bundle.corrupt"),
    "file mode 600": (lambda: archive(member("a", mode=0o600)), "bundle.mode"),
    "file mode 4755": (lambda: archive(member("a", mode=0o4755)), "bundle.mode"),
    "file mode 777": (lambda: archive(member("a", mode=0o777)), "bundle.mode"),
    "folder mode 700": (lambda: archive(member("a", tarfile.DIRTYPE, mode=0o700)), "bundle.mode"),
    "twice": (lambda: archive(member("a"), member("a")), "bundle.duplicate"),
    "folder twice": (lambda: archive(*[member("d", tarfile.DIRTYPE, mode=0o755)] * 2), "bundle.duplicate"),
    "file then below it": (lambda: archive(member("a"), member("a/b")), "bundle.duplicate"),
    "below then file": (lambda: archive(member("a/b"), member("a")), "bundle.duplicate"),
    "random bytes": (lambda: noise(b"3", 4096), "bundle.corrupt"),
    "empty": (lambda: b"", "bundle.truncated"),
    "gzip cut": (lambda: archive(member("a", content=MARKER))[:20], "bundle.truncated"),
    "tar cut inside a file": (_tar_cut_inside_a_file, "bundle.truncated"),
    "no end blocks": (_no_end_blocks, "bundle.truncated"),
    "header small, data big": (_small_header_big_data, "bundle.corrupt"),
    "bytes after the tar end": (_raw_after_end, "bundle.corrupt"),
    "bytes after the gzip end": (lambda: archive(member("a")) + b"junk", "bundle.corrupt"),
    "second gzip member": (lambda: archive(member("a")) + gzip.compress(b""), "bundle.corrupt"),
    "bad crc": (_bad_crc, "bundle.corrupt"),
    "a tail of zeros over 1 MiB": (lambda: gzip.compress(raw_tar(member("a")) + bytes(2 << 20)), "bundle.corrupt"),
}


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_a_hand_made_archive_that_breaks_a_rule_is_refused(case: str) -> None:
    make, code = CRAFTED[case]
    assert refused(make()).code == code


def test_the_unpack_caps_are_checked_from_the_headers_before_inflating(monkeypatch: pytest.MonkeyPatch) -> None:
    text = noise(b"5", 25_000).hex().encode()  # 50,000 bytes that deflate to about half
    data = archive(member("a", content=text), member("b", content=MARKER))
    assert len(entries(data)) == 2
    monkeypatch.setattr(bundle, "MAX_UNPACKED_BYTES", 50_000)
    assert refused(data).code == "bundle.too_large_unpacked"
    monkeypatch.setattr(bundle, "MAX_UNPACKED_BYTES", 512 << 20)
    monkeypatch.setattr(bundle, "MAX_RATIO", 1)
    assert entries(data), "below the floor the ratio is not checked"
    monkeypatch.setattr(bundle, "RATIO_FLOOR_BYTES", 0)
    assert refused(data).code == "bundle.ratio"
    monkeypatch.setattr(bundle, "MAX_RATIO", 200)
    monkeypatch.setattr(bundle, "MAX_ENTRIES", 1)
    assert refused(data).code == "bundle.too_many_entries"


def test_the_codes_are_stable_error_codes() -> None:
    assert len(set(BUNDLE_CODES)) == len(BUNDLE_CODES)
    assert all(re.fullmatch(ERROR_CODE_PATTERN, c) and c.startswith("bundle.") for c in BUNDLE_CODES)
    assert sorted(bundle.FILE_MODES) == [0o644, 0o755] and bundle.DIR_MODE == 0o755
