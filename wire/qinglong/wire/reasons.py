"""Why an Attempt ended without its task's exit code: stable codes, short messages. Touches nothing: declarations.

One catalogue (docs/decisions/0025-start-failures.md), standard library only.

`START_FAILURES`: why a task was never started, so nothing ran. The Worker's codes are what its start-failure
ACK may carry (the shell refuses any other code: `wire.bad_enum`); `start.cancelled` and `secret_unavailable`
are also the database's own, for a starting ACK it answered `not_started`. A Worker sends a code of its own that
is not here as `start.failed` and names it in the message (`start_failure`), so a start failure is never refused
for its code. `ENDS`: why a started task has no exit code (the completion's errorCode). The message a Worker sends
with a start failure is its own (it may name the user, group or path it refused), at most MESSAGE_MAX characters;
the catalogue's message is what readers show when none came (an older Worker, or an end).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from qinglong.wire.bundle import BUNDLE_CODES

MESSAGE_MAX: Final = 200  # characters (ql.run_attempts.error_message check)
START_FAILED: Final = "start.failed"  # the generic start failure (a Worker's code this catalogue lacks)
KILLED_AFTER_GRACE: Final = "process.killed_after_grace"

_BUNDLE_RULE: Final = "the task's bundle breaks a bundle rule and was not unpacked"
START_FAILURES: Final[Mapping[str, str]] = MappingProxyType({
    START_FAILED: "the Worker could not start the task",
    "start.cancelled": "the Run was cancelled before its task started",
    "secret_unavailable": "a secret the plan names is not there (deleted since the task was created)",
    "secret_env_refused": "a secret the plan names cannot be put in the task's environment",
    "secret_file_refused": "a secret file the plan names cannot be made safely",
    "plan.root_not_allowed": "the task would run as root, which this Worker does not allow: give the plan a user",
    "plan.user_not_allowed": "the plan's user is not on this Worker's run_as list",
    "plan.user_unknown": "the plan's user does not exist on the Worker's host",
    "plan.group_not_allowed": "the plan's group is not on this Worker's run_as_groups list",
    "plan.group_unknown": "the plan's group does not exist on the Worker's host",
    "plan.switch_not_permitted": "this Worker may not switch users or groups (it does not run as root)",
    "plan.cwd_absolute": "the plan's cwd is absolute and this Worker does not allow that",
    "plan.cwd_outside": "the plan's cwd leaves the Run's directory",
    "plan.cwd_missing": "the plan's absolute cwd is not a directory on the Worker's host",
    "plan.unsigned": "this Worker requires signed plans and the plan is not signed",
    "plan.signer_unknown": "the plan is signed by a key this Worker does not trust",
    "plan.signature_invalid": "the plan's signature does not match the plan",
    "deadline.one_sided": "the plan's timeout and the Attempt's deadline disagree",
    "deadline.negative": "the Attempt's deadline is negative",
    "deadline.unsafe": "the Attempt's deadline is not a safe integer",
    "argv.empty": "the plan's argv is empty",
    "argv.invalid": "the plan's argv is not a list of strings without NUL",
    "env.invalid": "the plan's environment has an entry the Worker refuses",
    "offer_id.invalid": "the offer's id is not a file name the Worker can use",
    "launch_nonce.invalid": "the launch's nonce is not a file name the Worker can use",
    "run_id.invalid": "the Run's id is not a file name the Worker can use",
    "launch.duplicate": "this launch was already made once: the Worker does not spawn it again",
    "launch.never_started": "the Worker restarted during the launch and the task had not started",
    "spawn.os_error": "the operating system refused to start the runner",
    "bundle.unavailable": "the control plane does not give the plan's bundle",
    "bundle.fetch_timeout": "fetching the plan's bundle took longer than the Worker's limit",
    "bundle.chunk": "a chunk of the plan's bundle did not fit the bundle",
    "bundle.digest_mismatch": "the plan's bundle does not hash to its digest",
    **{code: _BUNDLE_RULE for code in BUNDLE_CODES},
})  # fmt: skip
ENDS: Final[Mapping[str, str]] = MappingProxyType({
    "process.killed": "the task was ended by a signal",
    "process.vanished": "the task's runner ended without recording how the task ended",
    KILLED_AFTER_GRACE: "the task ignored its stop signal (SIGTERM) and was killed (SIGKILL) after the stop grace",
})  # fmt: skip


def message_of(code: str | None) -> str | None:
    """The catalogue's message for a code (None: a code it does not hold)."""
    if code is None:
        return None
    return START_FAILURES.get(code) or ENDS.get(code)


def fit(text: str) -> str:
    """`text` as a message the wire takes: control and line-separator characters as spaces, lone surrogates
    replaced, at most MESSAGE_MAX characters (cut with an ellipsis)."""
    clean = "".join(" " if ch < " " or ch in "\x7f\u2028\u2029" else ch for ch in text)
    clean = clean.encode("utf-8", "replace").decode("utf-8").strip() or "(no message)"
    return clean if len(clean) <= MESSAGE_MAX else clean[: MESSAGE_MAX - 1] + "…"


def start_failure(code: str, message: str | None) -> tuple[str, str]:
    """The (errorCode, errorMessage) a Worker sends for a start failure with `code`: a code outside the catalogue
    goes as `start.failed`, its message naming it; the message is the Worker's own, or the catalogue's."""
    if code not in START_FAILURES:
        return START_FAILED, fit(f"{code}: {message or START_FAILURES[START_FAILED]}")
    return code, fit(message or START_FAILURES[code])
