"""The typed view of one inbox journal record's data, shared by the Processor and the coordinator, and
the one way they save a record. Touches the journal (compare-and-set), the `qinglong.worker` log and, when a
record ends, the secret files its launch made (removed through delivery.py).

The record holds the offer exactly as received (with its lease token: the journal file is 0600),
the newest persisted Lease version, its conservative local expiry on CLOCK_BOOTTIME and the length of
the Lease that call granted, the activation snapshot, the launch nonce and durable process handle, the
exit, and the reason a record was isolated (or, for a start failure, its message). An error code written
while the task still runs is `process.killed_after_grace`: the stop KILLed it (coordinator.py). (Records
written before task output shipped carry `receipts` of an uploaded log: read and dropped.)

Secret files: `secret_dir` (the Run's directory), `secret_store` (the launch's folder on a tmpfs, if any) and
`secret_files` (delivery.SecretFile records: each path, its temporary name and, once created, its inode
identity) are the files a launch made or is about to make and that are not removed yet; never a value (values
are never on disk). `save` removes them before it writes a state that ends the Attempt here (ENDING: every
terminal state, start_failed, recovery_required) and keeps only those a file system fault left (`sweep`
retries them when the Worker starts).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from qinglong.wire import OfferOffered
from qinglong.wire.logline import emit
from qinglong.worker import spool
from qinglong.worker.delivery import SecretFile, remove_files
from qinglong.worker.identity import boot_id, boottime_ns
from qinglong.worker.journal import TERMINAL_STATES, Journal, Record, State
from qinglong.worker.runner import stderr_path

log = logging.getLogger("qinglong.worker")

# The states in which no task of the record runs any more (or is about to): its secret files are removed.
ENDING: Final[frozenset[State]] = TERMINAL_STATES | {"start_failed", "recovery_required"}


@dataclass(frozen=True)
class Inbox:
    offer: OfferOffered
    session_id: str
    lease_version: int
    # The conservative local Lease expiry: the send instant of the call that granted
    # the Lease plus the time the database said was left. None only in records older than offeredAtMs.
    lease_expires_boottime_ns: int | None = None
    boot_id: str | None = None
    lease_window_ms: int | None = None  # what that call granted (None in records written before it was kept)
    snapshot: Mapping[str, Any] | None = None
    launch_nonce: str | None = None
    handle: Mapping[str, Any] | None = None
    exit_code: int | None = None
    error_code: str | None = None
    reason: str | None = None
    secret_dir: str | None = None  # the Run's directory, where `secret_files` are
    secret_store: str | None = None  # the launch's folder on a tmpfs that holds their bytes (None: none)
    secret_files: tuple[Mapping[str, Any], ...] = ()  # delivery.SecretFile records not removed yet
    fetch_started_ns: int | None = None  # CLOCK_BOOTTIME when the bundle's fetch began (a reboot restarts it)

    @property
    def offer_id(self) -> str:
        return self.offer.offer.offer_id

    @property
    def deadline_at_ms(self) -> int | None:
        return None if self.snapshot is None else self.snapshot.get("deadlineAtMs")

    @classmethod
    def accepted(cls, offered: OfferOffered, session_id: str, sent_at_ns: int) -> Inbox:
        """A new record for an offer whose pull was sent at `sent_at_ns` (CLOCK_BOOTTIME)."""
        o = offered.offer
        left_ms = o.lease_expires_at_ms - o.offered_at_ms
        inbox = cls(offer=offered, session_id=session_id, lease_version=o.lease_version)
        return inbox.granted(o.lease_version, sent_at_ns, left_ms)

    def granted(self, lease_version: int, sent_at_ns: int, left_ms: int) -> Inbox:
        """The Lease as a call sent at `sent_at_ns` left it: `left_ms` to run, counted from the send."""
        return self.replace(
            lease_version=lease_version,
            lease_expires_boottime_ns=sent_at_ns + left_ms * 1_000_000,
            boot_id=boot_id(),
            lease_window_ms=left_ms,
        )

    def lease_left_s(self) -> float | None:
        """Seconds left on the local Lease (≤ 0: expired, also after a reboot); None: not known."""
        if self.lease_expires_boottime_ns is None:
            return None
        if self.boot_id != boot_id():
            return 0.0
        return (self.lease_expires_boottime_ns - boottime_ns()) / 1e9

    def expired_locally(self) -> bool:
        left = self.lease_left_s()
        return left is not None and left <= 0

    def short_of_lease(self) -> bool:
        """Less than half of the Lease last granted is left (or its length is not known): too little to spawn on,
        since one lost renewal answer would then leave no time for another before the local expiry."""
        left = self.lease_left_s()
        return left is not None and (self.lease_window_ms is None or left * 1000 < self.lease_window_ms / 2)

    def fence(self, generation: int) -> dict[str, Any]:
        """The Attempt fence fields every Attempt-scoped request carries (AttemptFence keyword arguments)."""
        o = self.offer.offer
        return {
            "worker_generation": generation,
            "project_id": o.project_id,
            "run_id": o.run_id,
            "attempt_id": o.attempt_id,
            "lease_generation": o.lease_generation,
            "lease_token": self.offer.lease_token,
        }

    def files(self) -> tuple[SecretFile, ...]:
        """The secret files of this record's launch not removed yet."""
        return tuple(SecretFile.from_dict(f) for f in self.secret_files)

    def with_files(self, files: tuple[SecretFile, ...]) -> Inbox:
        return self.replace(secret_files=tuple(f.to_dict() for f in files))

    def to_data(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["offer"] = self.offer.to_obj()
        data["snapshot"] = None if self.snapshot is None else dict(self.snapshot)
        data["handle"] = None if self.handle is None else dict(self.handle)
        data["secret_files"] = [dict(f) for f in self.secret_files]
        return data

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Inbox:
        values = dict(data)
        values["offer"] = OfferOffered.from_obj(values["offer"])
        values.pop("receipts", None)
        values["secret_files"] = tuple(values.get("secret_files", ()))
        return cls(**values)

    def replace(self, **changes: Any) -> Inbox:
        return dataclasses.replace(self, **changes)


def save(journal: Journal, record: Record, state: State, inbox: Inbox) -> Record:
    """Compare-and-set the record to `state` with `inbox`; a state change is logged (ids, the reason and the
    error code only: never the lease token, which lives in the offer). Into an ENDING state, the launch's
    secret files are removed first, and the record keeps only those that could not be. Into a terminal state,
    a launch that received secrets also loses its output files: they hold what the task printed unmasked, and
    everything of them was shipped masked before the end. The same write marks the record's files for
    retention.py: `succeeded` when the database acknowledged an exit code 0, else `failed`."""
    if state in ENDING and inbox.secret_files:
        inbox = inbox.with_files(_remove(inbox))
    if state in TERMINAL_STATES and inbox.handle is not None and inbox.offer.offer.plan.secret_names():
        _remove_output(inbox)
    # Only an acknowledged success marks the files for removal at once; anything else keeps them a while.
    succeeded = state == "completed" and inbox.exit_code == 0 and inbox.error_code is None
    saved = journal.cas(record.offer_id, record.revision, state=state, data=inbox.to_data(), succeeded=succeeded)
    if state != record.state:
        moved: dict[str, Any] = {"from": record.state, "to": state}  # `from` is a keyword: passed as a mapping
        moved.update(offer=record.offer_id, run=inbox.offer.offer.run_id, reason=inbox.reason, error=inbox.error_code)
        emit(log, logging.INFO, "record.state", **moved)
    return saved


def _remove(inbox: Inbox) -> tuple[SecretFile, ...]:
    """Remove the record's secret files (delivery.remove_files); log how many went and how many are left."""
    files = inbox.files()
    left = remove_files(inbox.secret_dir, files, inbox.secret_store)
    run = inbox.offer.offer.run_id
    emit(log, logging.INFO, "secret_files.removed", offer=inbox.offer_id, run=run, count=len(files) - len(left))
    if left:
        emit(log, logging.WARNING, "secret_files.left", offer=inbox.offer_id, run=run, count=len(left))
    return left


def _remove_output(inbox: Inbox) -> None:
    """Unlink the launch's stdout and stderr spools, segments included (already gone: nothing to do). Never raises."""
    assert inbox.handle is not None
    log_path = str(inbox.handle["log_path"])
    removed = sum(spool.remove(path) for path in (log_path, stderr_path(log_path)))  # a fault: the folder keeps it
    emit(log, logging.INFO, "output_files.removed", offer=inbox.offer_id, run=inbox.offer.offer.run_id, count=removed)


def sweep(record: Record) -> None:
    """A record that ended with secret files a fault kept (its data is final: nothing is saved): try again."""
    if record.state in ENDING and record.data.get("secret_files"):
        _remove(Inbox.from_data(record.data))
