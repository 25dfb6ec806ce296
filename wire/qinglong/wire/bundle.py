"""Task bundles: a task's scripts as one deterministic archive, packed and listed. Touches nothing (`pack` reads
its source, following no link; the rest are pure functions over bytes). Standard library only.

The operator's CLI packs a folder or a file (`pack`), stored by the SHA-256 of its bytes; the Worker unpacks it
into a Run's own directory (qinglong.worker.unpack). `entries` lists an archive, `members` reads it with each file's
bytes; both enforce every rule below (`pack` checks its output with `entries`). A refusal is a `BundleError`: a
stable `code` ("bundle." + a name below) and a one-line message naming at most a path, never contents.

- **Format**: POSIX tar (a pax header only for a path ustar cannot hold), gzip level 9 in one member (mtime 0, no
  name); entries sorted by path (bytewise UTF-8), files and folders only, mtime, uid and gid 0, no user or group
  names; a file 0755 if its source has any execute bit else 0644, a folder 0755. A folder packs its contents (no
  "./"), a file one entry by its base name. Mtimes, owners and other mode bits do not change the bytes.
- **Paths**: refused when absolute (`path_absolute`), with a ".." segment (`path_dotdot`), an empty or "." segment,
  a backslash, a control character, U+2028/U+2029 or not UTF-8 (`path_invalid`: a path is a valid wire string),
  over MAX_PATH_CHARS characters (`path_too_long`) or MAX_DEPTH segments (`path_too_deep`), twice or as both a
  file and a folder (`duplicate`).
- **Entries**: a symlink or hard link is `link`, any other type but file or folder `special_file` (so are GNU and
  global or sparse pax headers), another mode `mode`, over MAX_ENTRIES `too_many_entries`. A header's size is
  exactly how many bytes are read as the contents (ending sooner is `truncated`), so the running total is checked
  before a byte is inflated: MAX_UNPACKED_BYTES (`too_large_unpacked`), MAX_RATIO times the archive (`ratio`).
  Inflation goes CHUNK_BYTES at a time, a pax header holds 8 KiB, the zeros after the end 1 MiB: memory is bounded.
- **Damage**: ending early is `truncated`; a bad gzip stream or checksum, a bad header, bytes after the end or a
  second gzip member `corrupt`.
- **Source** (`pack`): a symlink in it or as itself is `source_link`, a device, socket or fifo `source_special`,
  missing `source_missing`, changed while read `source_changed`, packed bytes over `max_bytes` `too_large`
  (counted as written). An I/O fault is the OSError itself.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import io
import os
import re
import stat
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

MIB: Final = 1024 * 1024
BUNDLE_MAX_BYTES_DEFAULT: Final = 32 * MIB  # the stored archive's default cap
CHUNK_BYTES: Final = 256 * 1024  # the storage and fetch chunk, and the inflation step
MAX_ENTRIES: Final = 10_000
MAX_UNPACKED_BYTES: Final = 512 * MIB
MAX_RATIO: Final = 200  # unpacked bytes / archive bytes, once past RATIO_FLOOR_BYTES
RATIO_FLOOR_BYTES: Final = 16 * MIB  # below it any ratio is fine (a file of one repeated byte is no bomb)
MAX_PATH_CHARS: Final = 1024
MAX_DEPTH: Final = 32
FILE_MODES: Final = frozenset({0o644, 0o755})
DIR_MODE: Final = 0o755
COMPRESS_LEVEL: Final = 9

PATH_ABSOLUTE: Final = "bundle.path_absolute"
PATH_DOTDOT: Final = "bundle.path_dotdot"
PATH_INVALID: Final = "bundle.path_invalid"
PATH_TOO_LONG: Final = "bundle.path_too_long"
PATH_TOO_DEEP: Final = "bundle.path_too_deep"
DUPLICATE: Final = "bundle.duplicate"
LINK: Final = "bundle.link"
SPECIAL_FILE: Final = "bundle.special_file"
MODE: Final = "bundle.mode"
TOO_MANY_ENTRIES: Final = "bundle.too_many_entries"
TOO_LARGE_UNPACKED: Final = "bundle.too_large_unpacked"
RATIO: Final = "bundle.ratio"
TRUNCATED: Final = "bundle.truncated"
CORRUPT: Final = "bundle.corrupt"
TOO_LARGE: Final = "bundle.too_large"
SOURCE_LINK: Final = "bundle.source_link"
SOURCE_SPECIAL: Final = "bundle.source_special"
SOURCE_MISSING: Final = "bundle.source_missing"
SOURCE_CHANGED: Final = "bundle.source_changed"
PATH_BLOCKED: Final = "bundle.path_blocked"  # unpack: the Run's directory has something in an entry's way
BUNDLE_CODES: Final[tuple[str, ...]] = (
    PATH_ABSOLUTE, PATH_DOTDOT, PATH_INVALID, PATH_TOO_LONG, PATH_TOO_DEEP, DUPLICATE, LINK, SPECIAL_FILE, MODE,
    TOO_MANY_ENTRIES, TOO_LARGE_UNPACKED, RATIO, TRUNCATED, CORRUPT, TOO_LARGE, SOURCE_LINK, SOURCE_SPECIAL,
    SOURCE_MISSING, SOURCE_CHANGED, PATH_BLOCKED,
)  # fmt: skip

Kind = Literal["file", "dir"]
_BLOCK: Final = tarfile.BLOCKSIZE
_PAX_MAX: Final = 8 * 1024
_TAIL_MAX: Final = MIB
_FEED: Final = 64 * 1024  # compressed bytes handed to zlib at a time
_BAD_CHARACTER: Final = re.compile("[\x00-\x1f\x7f\\\\\u2028\u2029\ud800-\udfff]")
_PAX_RECORD: Final = re.compile(rb"([1-9][0-9]{0,5}) ([^=\n]+)=")
_DIGITS: Final = re.compile(rb"[0-9]{1,18}")
_LINK_TYPES: Final = (tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.GNUTYPE_LONGLINK)
_KINDS: Final[dict[bytes, Kind]] = {tarfile.REGTYPE: "file", tarfile.AREGTYPE: "file", tarfile.DIRTYPE: "dir"}
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a fifo swapped in cannot block


class BundleError(Exception):
    """A source or an archive that breaks a bundle rule. `code` is stable (BUNDLE_CODES); `message` is one line
    naming the rule and at most a path (its head when long), never a file's contents."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Entry:
    """One entry of an archive: its path, kind, size in bytes (0 for a folder) and mode."""

    path: str
    kind: Kind
    size: int
    mode: int


@dataclass(frozen=True)
class Packed:
    """A packed bundle: its bytes, their SHA-256 (hex) and its entries as `entries` lists them."""

    data: bytes = field(repr=False)
    digest: str
    entries: tuple[Entry, ...]


def _shown(path: str) -> str:
    """A path as a message shows it: repr'd (one line, any character escaped), its head only when long."""
    return repr(path if len(path) <= 80 else path[:77] + "...")


def check_path(path: str) -> list[str]:
    """The segments of `path`, or BundleError for a path a bundle may not hold (the module docstring)."""
    if path.startswith("/"):
        raise BundleError(PATH_ABSOLUTE, f"path {_shown(path)} is absolute")
    if not path or _BAD_CHARACTER.search(path):
        raise BundleError(PATH_INVALID, f"path {_shown(path)} is empty, not UTF-8 or has a forbidden character")
    if len(path) > MAX_PATH_CHARS:
        raise BundleError(PATH_TOO_LONG, f"path {_shown(path)} is longer than {MAX_PATH_CHARS} characters")
    segments = path.split("/")
    if ".." in segments:
        raise BundleError(PATH_DOTDOT, f"path {_shown(path)} has a '..' segment")
    if "" in segments or "." in segments:
        raise BundleError(PATH_INVALID, f"path {_shown(path)} has an empty or '.' segment")
    if len(segments) > MAX_DEPTH:
        raise BundleError(PATH_TOO_DEEP, f"path {_shown(path)} is deeper than {MAX_DEPTH} segments")
    return segments


class _Inflater:
    """An archive's tar stream, inflated as it is read, CHUNK_BYTES at a time: one gzip member, nothing after it."""

    def __init__(self, data: bytes) -> None:
        self._zlib = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip framing only
        self._data, self._fed, self._buf = memoryview(data), 0, bytearray()

    def _more(self) -> bool:
        """Inflate one step more into the buffer; False once the gzip member has ended."""
        if self._zlib.eof:
            return False
        source: bytes | memoryview = self._zlib.unconsumed_tail
        if not source:
            if self._fed >= len(self._data):
                raise BundleError(TRUNCATED, "the archive ends inside its gzip stream")
            source = self._data[self._fed : self._fed + _FEED]
            self._fed += len(source)
        try:
            self._buf += self._zlib.decompress(source, CHUNK_BYTES)
        except zlib.error:
            raise BundleError(CORRUPT, "the archive is not a valid gzip stream") from None
        return True

    def read(self, size: int) -> bytes:
        """Exactly `size` bytes of the tar stream (`truncated` when it ends sooner)."""
        while len(self._buf) < size:
            if not self._more():
                raise BundleError(TRUNCATED, "the tar stream ends inside an entry")
        out = bytes(self._buf[:size])
        del self._buf[:size]
        return out

    def finish(self) -> None:
        """After the end-of-archive blocks: only zero bytes (at most _TAIL_MAX), then the gzip member's end."""
        while self._more():
            if len(self._buf) > _TAIL_MAX:
                raise BundleError(CORRUPT, "more than 1 MiB follows the end of the tar stream")
        if self._buf.strip(b"\0"):
            raise BundleError(CORRUPT, "bytes follow the end of the tar stream")
        if self._zlib.unused_data or self._fed < len(self._data):
            raise BundleError(CORRUPT, "bytes follow the gzip stream")


def _header(block: bytes) -> tarfile.TarInfo:
    try:
        return tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
    except tarfile.HeaderError:
        raise BundleError(CORRUPT, "a tar header is not valid") from None


def _pax(body: bytes) -> dict[str, bytes]:
    """The records of a pax header ("<length> <key>=<value>\\n" each, filling it exactly)."""
    found: dict[str, bytes] = {}
    pos = 0
    while pos < len(body):
        match = _PAX_RECORD.match(body, pos)
        end = pos + int(match[1]) if match else 0
        if match is None or end > len(body) or end <= match.end() or body[end - 1] != 0x0A:
            raise BundleError(CORRUPT, "a pax header is not valid")
        found[match[2].decode("utf-8", "replace")] = body[match.end() : end - 1]
        pos = end
    return found


def _next(stream: _Inflater) -> Entry | None:
    """The next entry's header, checked alone (type, path, mode, size); None after the end-of-archive blocks."""
    block = stream.read(_BLOCK)
    if not block.strip(b"\0"):
        if stream.read(_BLOCK).strip(b"\0"):
            raise BundleError(CORRUPT, "the end-of-archive blocks are not two zero blocks")
        stream.finish()
        return None
    info, pax = _header(block), {}
    if info.type == tarfile.XHDTYPE:
        if not 0 <= info.size <= _PAX_MAX:
            raise BundleError(CORRUPT, "a pax header is larger than 8 KiB")
        pax = _pax(stream.read(-(-info.size // _BLOCK) * _BLOCK)[: info.size])
        info = _header(stream.read(_BLOCK))
        if info.type == tarfile.XHDTYPE:
            raise BundleError(CORRUPT, "a pax header follows a pax header")
    if info.type in _LINK_TYPES:
        raise BundleError(LINK, f"entry {_shown(info.name)} is a link")
    kind = _KINDS.get(info.type)
    if kind is None or any(key.startswith("GNU.sparse") for key in pax):
        raise BundleError(SPECIAL_FILE, f"entry {_shown(info.name)} is not a regular file or a folder")
    path = pax["path"].decode("utf-8", "surrogateescape") if "path" in pax else info.name  # not UTF-8: refused
    path = path.removesuffix("/") if kind == "dir" else path
    check_path(path)
    size = info.size if "size" not in pax else int(pax["size"]) if _DIGITS.fullmatch(pax["size"]) else -1
    if size < 0 or (kind == "dir" and size):
        raise BundleError(CORRUPT, f"entry {_shown(path)} has a bad size")
    if info.mode not in (FILE_MODES if kind == "file" else (DIR_MODE,)):
        raise BundleError(MODE, f"entry {_shown(path)} has mode {info.mode:o}, not 644 or 755 (755 for a folder)")
    return Entry(path, kind, size, info.mode)


def _contents(stream: _Inflater, size: int) -> Iterator[bytes]:
    left = size
    while left:
        chunk = stream.read(min(left, CHUNK_BYTES))
        left -= len(chunk)
        yield chunk
    stream.read(-size % _BLOCK)


def members(data: bytes) -> Iterator[tuple[Entry, Iterator[bytes]]]:
    """Each entry of the archive `data` in its order, with its contents' chunks (none for a folder), every rule
    of the module docstring enforced as it is read (BundleError). Chunks a caller leaves unread are read (and
    counted) before the next entry; the last entry is followed by the checks of the archive's end."""
    stream = _Inflater(data)
    explicit: dict[str, Kind] = {}  # every entry's path
    implied: set[str] = set()  # every folder above an entry
    unpacked = 0
    while (entry := _next(stream)) is not None:
        if len(explicit) >= MAX_ENTRIES:
            raise BundleError(TOO_MANY_ENTRIES, f"the archive has more than {MAX_ENTRIES} entries")
        parents = [entry.path[:i] for i, character in enumerate(entry.path) if character == "/"]
        if entry.path in explicit:
            raise BundleError(DUPLICATE, f"path {_shown(entry.path)} is in the archive twice")
        if any(explicit.get(p) == "file" for p in parents) or (entry.kind == "file" and entry.path in implied):
            raise BundleError(DUPLICATE, f"path {_shown(entry.path)} is both a file and a folder")
        unpacked += entry.size  # exactly what is read next: the caps hold before a byte of it is inflated
        if unpacked > MAX_UNPACKED_BYTES:
            raise BundleError(TOO_LARGE_UNPACKED, f"the archive unpacks to more than {MAX_UNPACKED_BYTES} bytes")
        if unpacked > max(MAX_RATIO * len(data), RATIO_FLOOR_BYTES):
            raise BundleError(RATIO, f"the archive unpacks to more than {MAX_RATIO} times its size")
        explicit[entry.path] = entry.kind
        implied.update(parents)
        chunks = _contents(stream, entry.size)
        yield entry, chunks
        for _ in chunks:
            pass


def entries(data: bytes) -> tuple[Entry, ...]:
    """The entries of the archive `data`, without unpacking it; BundleError for any rule it breaks."""
    return tuple(entry for entry, _ in members(data))


class _Capped:
    """The packed bytes: `too_large` as soon as they pass `cap` (what is written while that propagates is dropped)."""

    def __init__(self, cap: int) -> None:
        self.cap, self.out = cap, io.BytesIO()

    def write(self, data: bytes) -> int:
        if self.out.tell() <= self.cap and self.out.write(data) and self.out.tell() > self.cap:
            raise BundleError(TOO_LARGE, f"the packed bundle is larger than {self.cap} bytes")
        return len(data)

    def flush(self) -> None:
        pass


def _refused_source(path: str, mode: int) -> BundleError:
    if stat.S_ISLNK(mode):
        return BundleError(SOURCE_LINK, f"source {_shown(path)} is a symlink")
    return BundleError(SOURCE_SPECIAL, f"source {_shown(path)} is not a regular file or a folder")


def _listing(source: Path) -> tuple[Path, dict[str, tuple[int, int] | None]]:
    """The folder the paths are relative to and every path of the source (a file's with its device and inode, None
    for a folder), each checked, no symlink followed; caps on the count and the total size come before any read."""
    try:
        st = os.lstat(source)
    except FileNotFoundError:
        raise BundleError(SOURCE_MISSING, f"source {_shown(str(source))} does not exist") from None
    if stat.S_ISREG(st.st_mode):
        check_path(source.name)
        return source.parent, {source.name: (st.st_dev, st.st_ino)}
    if not stat.S_ISDIR(st.st_mode):
        raise _refused_source(str(source), st.st_mode)
    listed: dict[str, tuple[int, int] | None] = {}
    total = 0

    def walk(name: str, parent: int | None, prefix: str) -> None:
        nonlocal total
        try:
            folder = os.open(name, _DIR_FLAGS, dir_fd=parent)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise _refused_source(prefix.rstrip("/") or name, stat.S_IFLNK) from None
            raise
        try:
            for child in sorted(os.listdir(folder)):  # the same first refusal every time
                path = prefix + child
                check_path(path)
                st = os.stat(child, dir_fd=folder, follow_symlinks=False)
                if len(listed) >= MAX_ENTRIES:
                    raise BundleError(TOO_MANY_ENTRIES, f"the source has more than {MAX_ENTRIES} entries")
                if stat.S_ISDIR(st.st_mode):
                    listed[path] = None
                    walk(child, folder, path + "/")
                elif not stat.S_ISREG(st.st_mode):
                    raise _refused_source(path, st.st_mode)
                else:
                    listed[path] = (st.st_dev, st.st_ino)
                    total += st.st_size
                    if total > MAX_UNPACKED_BYTES:
                        raise BundleError(TOO_LARGE_UNPACKED, f"the source holds over {MAX_UNPACKED_BYTES} bytes")
        finally:
            os.close(folder)

    walk(str(source), None, "")
    return source, listed


def _info(path: str, kind: Kind, mode: int, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(path)
    info.type, info.mode, info.size, info.mtime = tarfile.DIRTYPE if kind == "dir" else tarfile.REGTYPE, mode, size, 0
    info.uid, info.gid, info.uname, info.gname = 0, 0, "", ""
    return info


def _add_file(tar: tarfile.TarFile, file_path: Path, path: str, identity: tuple[int, int]) -> None:
    """Add the file listed as `path` (at `file_path`) as it is when opened: the very inode listed, opened without
    following a symlink, all of it and nothing more (else `source_changed`)."""
    changed = BundleError(SOURCE_CHANGED, f"source {_shown(path)} changed while it was packed")
    try:
        fd = os.open(file_path, _FILE_FLAGS)
    except OSError as error:
        raise (changed if error.errno in (errno.ELOOP, errno.ENOENT, errno.ENOTDIR) else error) from None
    with os.fdopen(fd, "rb") as file:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != identity or not stat.S_ISREG(st.st_mode):
            raise changed
        try:
            tar.addfile(_info(path, "file", 0o755 if st.st_mode & 0o111 else 0o644, st.st_size), file)
        except OSError:
            if os.fstat(fd).st_size == st.st_size:
                raise
            raise changed from None  # it shrank: tarfile's "unexpected end of data"
        if file.read(1):
            raise changed


def pack(source: Path, *, max_bytes: int = BUNDLE_MAX_BYTES_DEFAULT) -> Packed:
    """Pack the folder or file `source` (the module docstring); BundleError for a refusal, OSError for a fault."""
    base, listed = _listing(source)
    out = _Capped(max_bytes)
    with (
        gzip.GzipFile(filename="", mode="wb", compresslevel=COMPRESS_LEVEL, fileobj=out, mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8") as tar,
    ):
        for path, identity in sorted(listed.items(), key=lambda item: item[0].encode("utf-8")):
            if identity is None:
                tar.addfile(_info(path, "dir", DIR_MODE, 0))
            else:
                _add_file(tar, base / path, path, identity)
    data = out.out.getvalue()
    return Packed(data, hashlib.sha256(data).hexdigest(), entries(data))
