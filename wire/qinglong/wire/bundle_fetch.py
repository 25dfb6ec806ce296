"""qinglong/bundle-fetch@v1: a Worker fetches its plan's bundle, one chunk per call. Touches nothing:
declarations.

Request: the Attempt fence, the bundle's digest (the plan's `bundle`) and a chunk's index. The answer is
ql_api.bundle_chunk_v1's `chunk` result: that chunk's bytes (every chunk is CHUNK_BYTES but the last), the
bundle's chunk count and size. A read changes nothing, so a call repeated after a lost answer gets the same
bytes; the Worker resumes from the chunks it holds. Only a live Attempt whose Lease holds, and only for the
digest its plan names, gets anything.
"""

from __future__ import annotations

from typing import Final, Literal

from qinglong.wire.bundle import CHUNK_BYTES
from qinglong.wire.codec import KIB
from qinglong.wire.common import SHA256_HEX, AttemptFence
from qinglong.wire.fields import Base64Bytes, Enum, Int, Message, wire

BUNDLE_FETCH_SCHEMA: Final = "qinglong/bundle-fetch@v1"
MAX_CHUNKS: Final = 2048
BUNDLE_LIMIT_BYTES: Final = MAX_CHUNKS * CHUNK_BYTES  # 512 MiB: the largest bundle_max_bytes a DBA may set


class BundleChunkRequest(AttemptFence):
    """Body of a fetch: the fence, the digest and the chunk's index."""

    SCHEMA = BUNDLE_FETCH_SCHEMA
    CAP = 4 * KIB

    digest: str = wire(SHA256_HEX)
    index: int = wire(Int(0, MAX_CHUNKS - 1))


class BundleChunk(Message):
    """One chunk of a bundle, and the bundle's shape."""

    SCHEMA = BUNDLE_FETCH_SCHEMA
    CAP = 4 * CHUNK_BYTES // 3 + 4 * KIB  # the chunk as base64 and its framing

    status: Literal["chunk"] = wire(Enum(("chunk",)), default="chunk")
    digest: str = wire(SHA256_HEX)
    index: int = wire(Int(0, MAX_CHUNKS - 1))
    chunk_count: int = wire(Int(1, MAX_CHUNKS))
    size_bytes: int = wire(Int(1, MAX_CHUNKS * CHUNK_BYTES))
    data: bytes = wire(Base64Bytes(CHUNK_BYTES))


MESSAGES: Final[tuple[type[Message], ...]] = (BundleChunkRequest, BundleChunk)
