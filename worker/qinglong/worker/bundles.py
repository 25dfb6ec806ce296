"""The Worker's bundle cache: the archives its plans name (qinglong.wire.bundle), by digest, in a bounded folder.
Touches `<work_dir>/bundles/` only (0700; nothing in it is ever executed or unpacked there). Standard library only;
nothing happens at import or construction.

A bundle arrives in chunks (qinglong.wire.bundle_fetch) into `<digest>.part`, each appended at its own offset
(index * CHUNK_BYTES), so a fetch resumes from what the file holds after a lost answer or a restart; a chunk
that does not fit (a shorter file, a wrong length) truncates the file back to the last whole chunk. `seal`
checks the SHA-256 of the whole and renames it to `<digest>`; a mismatch throws the file away. `read` checks
the digest again at every use (a flash cell that flipped a bit is a mismatch too, and the file goes) and marks
it used (its mtime: least recently used goes first). `evict` removes whole bundles, least recently used first,
until the folder is within its size, never one of `keep` (the bundles of Attempts not spawned yet) and never a
partial fetch of one of them.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Collection
from pathlib import Path
from typing import Final

from qinglong.wire.bundle import CHUNK_BYTES, BundleError

_DIGEST: Final = re.compile(r"[0-9a-f]{64}")
PART: Final = ".part"
# The Worker's own start-failure codes of bundles (the archive's are qinglong.wire.bundle.BUNDLE_CODES):
DIGEST_MISMATCH: Final = "bundle.digest_mismatch"  # fetched or cached bytes are not the digest's
CHUNK: Final = "bundle.chunk"  # a chunk that does not fit the bundle, or of another bundle
UNAVAILABLE: Final = "bundle.unavailable"  # the control plane does not give the plan's bundle
FETCH_TIMEOUT: Final = "bundle.fetch_timeout"  # the fetch took longer than fetch_limit_s
BUNDLE_CACHE_BYTES: Final = 256 * 1024 * 1024  # worker.toml bundle_cache_mib's default
FETCH_LIMIT_S: Final = 600.0  # worker.toml bundle_fetch_seconds's default


class BundleCache:
    """The cache, and how long a fetch may take (`fetch_limit_s`, worker.toml `bundle_fetch_seconds`)."""

    def __init__(self, root: Path, max_bytes: int, fetch_limit_s: float = FETCH_LIMIT_S) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.fetch_limit_s = fetch_limit_s

    def _path(self, digest: str, suffix: str = "") -> Path:
        if not _DIGEST.fullmatch(digest):
            raise BundleError(CHUNK, "a bundle digest is 64 lowercase hexadecimal characters")
        return self.root / f"{digest}{suffix}"

    def _ensure(self) -> None:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)

    def has(self, digest: str) -> bool:
        """Whether the whole bundle is here (checked again when it is read)."""
        return self._path(digest).is_file()

    def next_chunk(self, digest: str) -> int:
        """The index of the first chunk a resumed fetch needs (whole chunks held so far)."""
        try:
            return self._path(digest, PART).stat().st_size // CHUNK_BYTES
        except FileNotFoundError:
            return 0

    def add_chunk(self, digest: str, index: int, data: bytes, chunk_count: int) -> None:
        """Write chunk `index` of `chunk_count` at its offset; a chunk that is not the last must be whole."""
        if (
            not 0 <= index < chunk_count
            or len(data) > CHUNK_BYTES
            or (index < chunk_count - 1 and len(data) != CHUNK_BYTES)
        ):
            raise BundleError(CHUNK, f"chunk {index} of {chunk_count} has {len(data)} bytes")
        self._ensure()
        fd = os.open(self._path(digest, PART), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            held = os.fstat(fd).st_size // CHUNK_BYTES
            if index > held:
                raise BundleError(CHUNK, f"chunk {index} arrived before chunk {held}")
            os.ftruncate(fd, index * CHUNK_BYTES)  # what follows this chunk is fetched again
            os.pwrite(fd, data, index * CHUNK_BYTES)
        finally:
            os.close(fd)

    def seal(self, digest: str) -> None:
        """The fetched file becomes the bundle if its SHA-256 is `digest`; else it is thrown away."""
        part = self._path(digest, PART)
        if _sha256(part) != digest:
            part.unlink(missing_ok=True)
            raise BundleError(DIGEST_MISMATCH, "the fetched bundle's SHA-256 is not its digest")
        os.replace(part, self._path(digest))

    def read(self, digest: str) -> bytes:
        """The bundle's bytes, checked against its digest (a mismatch removes the file), marked as used."""
        path = self._path(digest)
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != digest:
            path.unlink(missing_ok=True)
            raise BundleError(DIGEST_MISMATCH, "the cached bundle's SHA-256 is not its digest")
        os.utime(path)
        return data

    def evict(self, keep: Collection[str]) -> list[str]:
        """Remove bundles (and stale partial fetches), least recently used first, until the folder holds at most
        `max_bytes`; never one of `keep`. The names removed."""
        try:
            entries = [(e.stat(follow_symlinks=False), e) for e in os.scandir(self.root)]
        except FileNotFoundError:
            return []
        total = sum(st.st_size for st, _ in entries)
        removed: list[str] = []
        for st, entry in sorted(entries, key=lambda pair: pair[0].st_mtime_ns):
            if total <= self.max_bytes:
                break
            if entry.name.removesuffix(PART) in keep:
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
            total -= st.st_size
            removed.append(entry.name)
        return removed

    def used_bytes(self) -> int:
        try:
            return sum(e.stat(follow_symlinks=False).st_size for e in os.scandir(self.root))
        except FileNotFoundError:
            return 0


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()
