"""`qinglong run logs`: print an Attempt's output as the user API serves it (qinglong/run-output@v1), once
or following it while the task runs. Touches the user API (through the client it is given, one GET per page),
stdout and stderr, and sleeps between polls.

The task's stdout goes to stdout and its stderr to stderr, byte for byte, chunk by chunk in arrival order.
Where the database dropped bytes of a long stream (it keeps each stream's head and tail), one marker line
says how many, on that stream: `[qinglong: 4194304 bytes of stdout dropped here]`. `--json` prints each page
as one JSON line instead (the API's fields; data as base64). `--follow` polls every POLL_S seconds until the
Run is terminal and its output is read; when a retry starts another Attempt it goes on with that one and says
so on stderr; it then answers how the Run ended, for the command's exit status. Without `--follow` it prints what
the database holds now and ends. An Attempt that ended with an errorCode (a start failure: nothing ran; or a task
that ended without an exit code, e.g. killed after ignoring its stop signal) gets one line on stderr once its
output is printed: `[qinglong: attempt 1 failed before its task started (nothing ran): plan.root_not_allowed: …]`
(`explain` gives it: the CLI reads the Run's timeline for the Worker's message). Not with `--json`.
"""

from __future__ import annotations

import base64
import json
import sys
import time
from collections.abc import Callable
from typing import Any, BinaryIO, Final

from qinglong.cli.printing import plural
from qinglong.wire.common import ENDED_RUN_STATUSES

POLL_S: Final = 1.0

Fetch = Callable[[int | None, int | None], dict[str, Any]]  # (attempt number, after seq) → one page
Explain = Callable[[dict[str, Any]], str | None]  # an ended Attempt of a page → the line saying why, if any


class Printer:
    """Writes chunks to the two streams, with a marker where bytes were dropped."""

    def __init__(self, out: BinaryIO, err: BinaryIO) -> None:
        self._files = {"stdout": out, "stderr": err}
        self._ends: dict[str, int] = {}

    def reset(self) -> None:
        """A new Attempt: its streams start at offset 0."""
        self._ends.clear()

    def chunk(self, stream: str, offset: int, data: bytes) -> None:
        end = self._ends.get(stream, 0)
        if offset + len(data) <= end:
            return  # already printed (a page read twice)
        f = self._files[stream]
        if offset > end:
            f.write(f"\n[qinglong: {plural(offset - end, 'byte')} of {stream} dropped here]\n".encode())
        f.write(data[max(0, end - offset) :])
        f.flush()
        self._ends[stream] = offset + len(data)


def _finished(page: dict[str, Any], pinned: bool) -> bool:
    """Nothing more will come: the Attempt ended and (unless one Attempt was asked for) the Run too."""
    attempt = page["attempt"]
    if pinned:
        return attempt is not None and attempt["endedAtMs"] is not None
    return page["runStatus"] in ENDED_RUN_STATUSES and (attempt is None or attempt["endedAtMs"] is not None)


def _explain(explain: Explain | None, attempt: dict[str, Any] | None) -> None:
    """The line saying why `attempt` ended without an exit code, on stderr (nothing for any other)."""
    if explain is None or attempt is None or attempt["endedAtMs"] is None or attempt["errorCode"] is None:
        return
    line = explain(attempt)
    if line is not None:
        print(f"[qinglong: {line}]", file=sys.stderr, flush=True)


def print_logs(
    fetch: Fetch, attempt: int | None, follow: bool, as_json: bool, explain: Explain | None = None
) -> str | None:
    """Read pages until the held output is printed (or, following, until nothing more will come). Following: how the
    Run ended (the Attempt's status when one was asked for); else None."""
    printer = Printer(sys.stdout.buffer, sys.stderr.buffer)
    after: int | None = None
    current = attempt
    if as_json:
        explain = None
    while True:
        page = fetch(current, after)
        shown = page["attempt"]
        if current is None and shown is not None:
            current = shown["attemptNo"]  # pin the latest, so pages of one Attempt follow each other
        if as_json:
            print(json.dumps(page), flush=True)
        else:
            for c in page["chunks"]:
                printer.chunk(c["stream"], c["offset"], base64.b64decode(c["data"]))
        if page["chunks"]:
            after = page["chunks"][-1]["seq"]
        if page["more"]:
            continue
        if not follow:
            _explain(explain, shown)
            return None
        if _finished(page, attempt is not None):
            _explain(explain, shown)
            return str(page["runStatus"] if attempt is None else shown["status"])
        if shown is not None and shown["endedAtMs"] is not None and page["attempts"] > shown["attemptNo"]:
            _explain(explain, shown)
            current = shown["attemptNo"] + 1  # a retry started the next Attempt (seq keeps growing: `after` holds)
            printer.reset()
            print(f"[qinglong: attempt {current} starts]", file=sys.stderr, flush=True)
            continue
        time.sleep(POLL_S)
