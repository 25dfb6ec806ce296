"""The Worker's bundle cache (worker/qinglong/worker/bundles.py): chunks land at their offsets and a fetch resumes
from the whole chunks held (a chunk out of turn is refused, one again rewrites it and drops what followed); a
bundle is sealed only when its SHA-256 is its digest (else the fetched file goes); a read checks the digest again
(a flipped bit: the file goes) and marks it used; eviction removes the least recently used first, never a kept
one, until the folder fits. Touches temporary folders only.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from qinglong.wire.bundle import CHUNK_BYTES, BundleError
from qinglong.worker.bundles import BundleCache


def blob(n: int, seed: bytes = b"b") -> tuple[str, bytes]:
    data = hashlib.shake_256(seed).digest(n)
    return hashlib.sha256(data).hexdigest(), data


def chunks(data: bytes) -> list[bytes]:
    return [data[i : i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)]


def fill(cache: BundleCache, digest: str, data: bytes) -> None:
    parts = chunks(data)
    for i, part in enumerate(parts):
        cache.add_chunk(digest, i, part, len(parts))
    cache.seal(digest)


def test_a_bundle_fetched_in_chunks_is_sealed_and_read_back(tmp_path: Path) -> None:
    cache = BundleCache(tmp_path / "bundles", 1 << 30)
    digest, data = blob(2 * CHUNK_BYTES + 123)
    assert not cache.has(digest) and cache.next_chunk(digest) == 0
    fill(cache, digest, data)
    assert cache.has(digest) and cache.read(digest) == data
    assert sorted(os.listdir(tmp_path / "bundles")) == [digest]
    assert (tmp_path / "bundles").stat().st_mode & 0o777 == 0o700


def test_a_fetch_resumes_from_the_whole_chunks_held(tmp_path: Path) -> None:
    cache = BundleCache(tmp_path / "bundles", 1 << 30)
    digest, data = blob(3 * CHUNK_BYTES + 5)
    parts = chunks(data)
    cache.add_chunk(digest, 0, parts[0], 4)
    cache.add_chunk(digest, 1, parts[1], 4)
    assert cache.next_chunk(digest) == 2, "a restarted Worker goes on from chunk 2"
    with pytest.raises(BundleError) as early:
        cache.add_chunk(digest, 3, parts[3], 4)  # chunk 2 never arrived
    assert early.value.code == "bundle.chunk"
    cache.add_chunk(digest, 1, parts[1], 4)  # a repeat (a lost answer): rewritten, what followed is fetched again
    assert cache.next_chunk(digest) == 2
    for i in (2, 3):
        cache.add_chunk(digest, i, parts[i], 4)
    cache.seal(digest)
    assert cache.read(digest) == data


@pytest.mark.parametrize(("index", "size", "count"), [(0, CHUNK_BYTES - 1, 2), (0, CHUNK_BYTES + 1, 1), (2, 10, 2)])
def test_a_chunk_of_the_wrong_shape_is_refused(tmp_path: Path, index: int, size: int, count: int) -> None:
    cache = BundleCache(tmp_path / "bundles", 1 << 30)
    digest, _ = blob(10)
    with pytest.raises(BundleError) as refused:
        cache.add_chunk(digest, index, bytes(size), count)
    assert refused.value.code == "bundle.chunk"
    assert cache.next_chunk(digest) == 0


def test_bytes_that_are_not_the_digest_are_thrown_away(tmp_path: Path) -> None:
    cache = BundleCache(tmp_path / "bundles", 1 << 30)
    digest, data = blob(1000)
    cache.add_chunk(digest, 0, data[:-1] + b"?", 1)
    with pytest.raises(BundleError) as refused:
        cache.seal(digest)
    assert refused.value.code == "bundle.digest_mismatch"
    assert not cache.has(digest) and os.listdir(tmp_path / "bundles") == []
    fill(cache, digest, data)
    path = tmp_path / "bundles" / digest
    path.write_bytes(data[:-1] + b"?")  # a bit flipped in the cache since
    with pytest.raises(BundleError) as flipped:
        cache.read(digest)
    assert flipped.value.code == "bundle.digest_mismatch" and not path.exists()


def test_eviction_removes_the_least_recently_used_and_never_a_kept_one(tmp_path: Path) -> None:
    cache = BundleCache(tmp_path / "bundles", 3 * 1000)
    digests = []
    for i in range(4):
        digest, data = blob(1000, bytes([i]))
        fill(cache, digest, data)
        os.utime(tmp_path / "bundles" / digest, ns=(i * 10**9, i * 10**9))  # 0 is the least recently used
        digests.append(digest)
    cache.read(digests[0])  # used now: the most recent
    assert cache.evict(keep={digests[1]}) == [digests[2]]
    assert sorted(os.listdir(tmp_path / "bundles")) == sorted((digests[0], digests[1], digests[3]))
    cache.max_bytes = 0
    assert cache.evict(keep={digests[1]}) == [digests[3], digests[0]]
    assert os.listdir(tmp_path / "bundles") == [digests[1]] and cache.used_bytes() == 1000


def test_a_digest_that_is_not_one_is_refused(tmp_path: Path) -> None:
    cache = BundleCache(tmp_path / "bundles", 1 << 30)
    for bad in ("../escape", "A" * 64, "0" * 63):
        with pytest.raises(BundleError):
            cache.has(bad)
    assert not (tmp_path / "bundles").exists()
