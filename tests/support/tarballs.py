"""Hand-made tar members and gzip archives, names and types as given and nothing normalised: what an attacker
would store as a bundle (tests of qinglong.wire.bundle and qinglong.worker.unpack, and the bundle attack
engine). Touches nothing.
"""

from __future__ import annotations

import gzip
import io
import tarfile


def member(name: str, kind: bytes = tarfile.REGTYPE, content: bytes = b"", mode: int = 0o644, link: str = "",
           pax: dict[str, str] | None = None) -> tuple[tarfile.TarInfo, bytes]:  # fmt: skip
    """One hand-made tar member: its header and contents."""
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size, info.linkname = kind, mode, len(content), link
    info.pax_headers = pax or {}
    return info, content


def raw_tar(*members: tuple[tarfile.TarInfo, bytes], fmt: int = tarfile.PAX_FORMAT, **options: object) -> bytes:
    """An uncompressed tar of `members` as tarfile writes it."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt, encoding="utf-8", **options) as tar:  # type: ignore[call-overload]
        for info, content in members:
            tar.addfile(info, io.BytesIO(content) if content else None)
    return out.getvalue()


def archive(*members: tuple[tarfile.TarInfo, bytes], fmt: int = tarfile.PAX_FORMAT, **options: object) -> bytes:
    """A gzip-compressed tar of `members` (gzip mtime 0)."""
    return gzip.compress(raw_tar(*members, fmt=fmt, **options), mtime=0)
