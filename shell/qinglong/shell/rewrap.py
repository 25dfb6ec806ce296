"""The rewrap pass of a key-encryption-key rotation (docs/operations.md, "Project secrets"): move every sealed
secret version's data key to the shell's current key-encryption key, a page at a time. Touches the database
(ql_api.secret_rewrap_page_v1, ql_api.secret_rewrap_v1), the metrics and the log.

A pass pages the versions whose key is not the current one (100 a page, by version id) and, for each, unwraps the
data key with the key that wrapped it and wraps it again under the current one (sealing.Sealer.rewrap: the value
is never decrypted, and its ciphertext never leaves the database), then writes it back with a compare-and-set on
the old key id, so two shells rewrapping at once, or a delete in between, leave one consistent row. A version
whose key this shell does not hold (or that does not authenticate) is skipped and counted, never retried in the
pass; the pass ends at the first empty page. Counts are logged (key ids, never key material) and the versions left
under another key are the gauge qinglong_shell_secret_versions_not_current.

One pass at a time per shell process (`Rewrapper`): started when the shell starts and again after each SIGHUP
reload, a new pass replacing one under way (its key may have changed). The database being unavailable retries the
pass after RETRY_S; a bug (a database fault, an answer outside its shape) ends it, logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Final

from qinglong.shell.db import BadProjection, Database, DatabaseFault, StorageConflict, StorageUnavailable
from qinglong.shell.metrics import SECRET_REWRAPS, SECRET_VERSIONS_NOT_CURRENT, child
from qinglong.shell.routes import KEK_ID_PATTERN
from qinglong.shell.sealing import TAMPERED, WRAPPED_KEY_BYTES, Sealed, Sealer, Unsealable
from qinglong.wire.codec import WireError
from qinglong.wire.common import SECRET_NAME_PATTERN
from qinglong.wire.fields import Base64Bytes, Enum, List, Nested, Record, Str, Uuid, wire
from qinglong.wire.logline import emit

log = logging.getLogger("qinglong.shell")

PAGE_SIZE: Final = 100
PAGE_MAX: Final = 1000  # ql_api.secret_rewrap_page_v1's p_limit bound
RETRY_S: Final = 30.0


class _Version(Record):
    """One version of a page: who it belongs to (the associated data) and its wrapped data key, never a value."""

    version_id: str = wire(Uuid())
    project_id: str = wire(Uuid())
    name: str = wire(Str(64, min_len=1, pattern=SECRET_NAME_PATTERN))
    kek_id: str = wire(Str(12, min_len=12, pattern=KEK_ID_PATTERN))
    wrapped_key: bytes = wire(Base64Bytes(WRAPPED_KEY_BYTES, min_bytes=WRAPPED_KEY_BYTES))


class _Page(Record):
    status: str = wire(Enum(("listed",)))
    versions: tuple[_Version, ...] = wire(List(Nested(_Version), max_items=PAGE_MAX))


@dataclass
class Counts:
    """What one pass did: versions moved to the current key, found moved (or deleted) by someone else, and skipped
    because their key is not held here or they do not authenticate (the key ids it lacked: names, not keys)."""

    rewrapped: int = 0
    unchanged: int = 0
    unknown_kek: int = 0
    tampered: int = 0
    missing_kek_ids: set[str] = field(default_factory=set)

    @property
    def skipped(self) -> int:
        return self.unknown_kek + self.tampered


async def rewrap_pass(db: Database, sealer: Sealer, *, page_size: int = PAGE_SIZE) -> Counts:
    """One pass over every version under another key than `sealer`'s current one (BadProjection: an answer
    outside its shape; StorageError: the database could not serve)."""
    current, counts, after = sealer.current_id, Counts(), None
    while True:
        answer = await db.call("secret_rewrap_page_v1", {"p_kek_id": current, "p_limit": page_size, "p_after": after})
        try:
            page = _Page.from_obj(answer)
        except WireError:
            raise BadProjection("secret_rewrap_page_v1 answered outside its shape") from None
        if not page.versions:
            return counts
        for version in page.versions:
            await _rewrap(db, sealer, version, counts)
        after = page.versions[-1].version_id


async def _rewrap(db: Database, sealer: Sealer, version: _Version, counts: Counts) -> None:
    try:
        # The value's nonce and ciphertext stay in the database: a rewrap carries them, never reads them.
        sealed = sealer.rewrap(
            Sealed(version.kek_id, version.wrapped_key, b"", b""),
            project_id=version.project_id, name=version.name, version_id=version.version_id,
        )  # fmt: skip
    except Unsealable as exc:
        if exc.reason == TAMPERED:
            counts.tampered += 1
            emit(log, logging.ERROR, "secrets.rewrap_skipped", reason=exc.reason, version_id=version.version_id,
                 kek_id=version.kek_id)  # fmt: skip
        else:
            counts.unknown_kek += 1
            counts.missing_kek_ids.add(version.kek_id)
        child(SECRET_REWRAPS, "skipped").inc()
        return
    if sealed.kek_id == version.kek_id:  # the current key changed under this pass (a reload): its pass follows
        return
    answer = await db.call(
        "secret_rewrap_v1",
        {"p_version_id": version.version_id, "p_from_kek_id": version.kek_id, "p_kek_id": sealed.kek_id,
         "p_wrapped_key": sealed.wrapped_key},
    )  # fmt: skip
    status = answer.get("status")
    if status == "rewrapped":
        counts.rewrapped += 1
    elif status == "unchanged" or (status == "not_found" and answer.get("reason") == "secret"):
        counts.unchanged += 1
    else:
        raise BadProjection("secret_rewrap_v1 answered outside its shape")
    child(SECRET_REWRAPS, "rewrapped" if status == "rewrapped" else "unchanged").inc()


class Rewrapper:
    """The one rewrap pass of a shell process at a time (module docstring)."""

    def __init__(self, db: Database, sealer: Sealer, *, retry_s: float = RETRY_S) -> None:
        self._db, self._sealer, self._retry_s = db, sealer, retry_s
        self._task: asyncio.Task[Counts | None] | None = None

    def start(self) -> None:
        """Start a pass now, replacing one under way."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._task = asyncio.ensure_future(self._run())

    async def wait(self) -> Counts | None:
        """The counts of the latest pass once it ends (None: it ended on a bug, or none was started)."""
        if self._task is None:
            return None
        with contextlib.suppress(asyncio.CancelledError):
            return await asyncio.shield(self._task)
        return None

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> Counts | None:
        while True:
            started, current = time.perf_counter(), self._sealer.current_id
            try:
                counts = await rewrap_pass(self._db, self._sealer)
            except (StorageUnavailable, StorageConflict) as exc:
                emit(log, logging.WARNING, "secrets.rewrap_failed", sqlstate=exc.sqlstate, error=exc.error,
                     retry_in_s=self._retry_s)  # fmt: skip
                await asyncio.sleep(self._retry_s)
                continue
            except (DatabaseFault, BadProjection) as exc:
                sqlstate = exc.sqlstate if isinstance(exc, DatabaseFault) else None
                emit(log, logging.ERROR, "secrets.rewrap_failed", sqlstate=sqlstate, error=type(exc).__name__)
                return None
            SECRET_VERSIONS_NOT_CURRENT.set(counts.skipped)
            level = logging.WARNING if counts.skipped else logging.INFO
            emit(log, level, "secrets.rewrapped", kek_id=current, rewrapped=counts.rewrapped,
                 unchanged=counts.unchanged, skipped_unknown_kek=counts.unknown_kek, skipped_tampered=counts.tampered,
                 missing_kek_ids=",".join(sorted(counts.missing_kek_ids)) or None,
                 ms=round((time.perf_counter() - started) * 1000, 2))  # fmt: skip
            return counts
