"""One `qinglong-worker run` process of a chaos run (its folder, config, journal and fault proxy) and the
record of a fault done to it. Touches: its folder (the log it appends to) and the process it starts."""

from __future__ import annotations

import math
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.chaos.proxy import FaultProxy
from tests.support.env import start_worker


@dataclass
class Fault:
    kind: str  # kill | kill_long | stop | journal
    worker: int
    start: float  # wall time
    end: float = math.inf  # wall time the Worker was back (its first answer after the fault)


@dataclass
class WorkerSlot:
    index: int
    worker_id: str
    folder: Path
    config: Path
    proxy: FaultProxy
    popen: subprocess.Popen[bytes] | None = None
    busy: bool = False  # a fault is in progress
    starts: int = 0

    @property
    def journal(self) -> Path:
        return self.folder / "inbox.sqlite"

    @property
    def work_dir(self) -> Path:
        return self.folder / "runs"

    @property
    def log(self) -> Path:
        return self.folder / "worker.log"

    def start(self) -> None:
        self.starts += 1
        with self.log.open("ab") as log:
            log.write(f"--- start {self.starts} at {time.time():.3f}\n".encode())
            log.flush()
        self.popen = start_worker(self.config, self.log)

    def kill(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.kill()
        if self.popen is not None:
            self.popen.wait()

    def signal(self, signum: int) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signum)
