"""Retention: when what an ended Attempt left on this Worker goes. Touches the journal (the records' `files` mark,
pruning) and an ended Attempt's files: its launch folder `work_dir/<offer_id>/` (the task's stdout and stderr,
status, identity and lease files), the Run's directory `work_dir/tasks/<run_id>/` (what the task and its
unpacked bundle left there) and any secret file a fault kept (inbox.sweep). Nothing else: never an absolute
`cwd` outside the Run's directory, never the bundle cache.

Driven by durable journal state only (journal.py): the write that ends a record marks its files `succeeded`
(the database acknowledged an exit code 0) or `failed` in the same transaction; a record not ended, or ended
lease_lost_local_execution_unverified (its process may still run), is never touched. Secret files go earlier,
with that very write (inbox.save). A pass (`Retention.sweep`: at start before the first pull, then every tick)
takes the records whose files are due — `succeeded` ones `keep_files_s` after their end, `failed` ones
`keep_failed_files_s` after it — at most PASS_RECORDS of them, and for each one, in order:
1. skips it while the launch's wrapper still runs (its files are still written: the next pass tries again);
2. removes its secret files left, its launch folder, then the Run's directory unless another record of the
   Run still has files (a retry of it on this Worker shares the directory); a file already gone is fine;
3. marks it `removed` in the journal.
Then, when it marked any (or PRUNE_EVERY_S after the last time), the journal deletes the `removed` records
that ended more than `journal_keep_s` ago, never the newest `journal_keep_records` (`qinglong-worker journal
list` shows them), and returns the freed pages to the file system. A kill between any two steps leaves the
record due: the next pass (a restart's first) does the rest again. A removal that fails (an OSError other than
a missing file) leaves the record due and is logged once per process.

Test hook: when the environment variable QINGLONG_WORKER_TEST_KILL_AT names a step (KILL_STEPS), the Worker
sends itself SIGKILL there. Only the tests set it; unset (as in production) it does nothing.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from qinglong.wire.logline import emit
from qinglong.worker.controller import LocalProcessController
from qinglong.worker.identity import ProcessHandle
from qinglong.worker.inbox import Inbox, sweep
from qinglong.worker.journal import Journal, Record

log = logging.getLogger("qinglong.worker")

PASS_RECORDS: Final = 16
PRUNE_EVERY_S: Final = 60.0
KILL_AT: Final = "QINGLONG_WORKER_TEST_KILL_AT"
# due: a record's files are due, nothing removed yet; launch_removed: its launch folder is gone, the Run's
# directory not yet; files_removed: every file gone, the record not marked; marked: marked, not pruned;
# pruned: records deleted, the pages not yet returned; completion_pending (coordinator.py): a completion
# persisted and not yet sent.
KILL_STEPS: Final = ("due", "launch_removed", "files_removed", "marked", "pruned", "completion_pending")


def kill_at(step: str) -> None:
    """The test hook (module docstring): SIGKILL this process at `step` when the tests ask for it."""
    if os.environ.get(KILL_AT) == step:
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass(frozen=True)
class Retention:
    """How long an ended Attempt's files and its journal record stay (worker.toml, docs/operations.md)."""

    keep_files_s: float = 0.0
    keep_failed_files_s: float = 86400.0
    journal_keep_s: float = 3 * 86400.0
    journal_keep_records: int = 100


def remove_tree(path: Path) -> None:
    """Remove `path` and everything under it without following a symlink; a missing path is fine; a folder the
    task made unwritable is made writable for its owner first. Raises OSError for anything else."""

    def retry(func: Callable[..., Any], failed: str, error: BaseException) -> None:
        if isinstance(error, FileNotFoundError):
            return
        if not isinstance(error, PermissionError) or failed == str(path):
            raise error
        os.chmod(os.path.dirname(failed), 0o700)
        func(failed)

    if sys.version_info >= (3, 12):  # `onerror` is deprecated from 3.12 (Debian 13's Python is 3.13)
        shutil.rmtree(path, onexc=retry)
    else:
        shutil.rmtree(path, onerror=lambda func, failed, info: retry(func, failed, info[1]))


class Sweeper:
    """One Worker's retention passes over its journal and `work_dir`."""

    def __init__(
        self, journal: Journal, work_dir: Path, controller: LocalProcessController, retention: Retention
    ) -> None:
        self._journal = journal
        self._work_dir = work_dir
        self._controller = controller
        self._retention = retention
        self._pruned_at: float | None = None
        self._failing: set[str] = set()  # offers whose removal failed (logged once)

    def sweep(self) -> int:
        """One pass (module docstring); how many records' files went."""
        now, r = time.time(), self._retention
        marked = 0
        for record in self._journal.due(now - r.keep_files_s, now - r.keep_failed_files_s, PASS_RECORDS):
            kill_at("due")
            if self._remove(record):
                self._journal.removed(record.offer_id)
                kill_at("marked")
                marked += 1
        if marked or self._pruned_at is None or time.monotonic() - self._pruned_at >= PRUNE_EVERY_S:
            self._pruned_at = time.monotonic()
            if self._journal.prune(now - r.journal_keep_s, r.journal_keep_records):
                kill_at("pruned")
        return marked

    def _remove(self, record: Record) -> bool:
        inbox = Inbox.from_data(record.data)  # the ids as the wire checked them: UUIDs, safe as file names
        launch, run_id = self._work_dir / inbox.offer_id, inbox.offer.offer.run_id
        handle = None if inbox.handle is None else ProcessHandle.from_dict(inbox.handle)
        if handle is not None and launch.exists() and self._controller.verify(handle) != "exited":
            return False  # the wrapper still runs (or cannot be proven gone): its files stay
        try:
            sweep(record)
            remove_tree(launch)
            kill_at("launch_removed")
            if not self._journal.run_needed(run_id, record.offer_id):
                remove_tree(self._work_dir / "tasks" / run_id)
        except OSError as error:
            if record.offer_id not in self._failing:
                self._failing.add(record.offer_id)
                emit(log, logging.WARNING, "files.left", offer=record.offer_id, run=run_id, error=str(error))
            return False
        kill_at("files_removed")
        self._failing.discard(record.offer_id)
        emit(log, logging.INFO, "files.removed", offer=record.offer_id, run=run_id)
        return True
