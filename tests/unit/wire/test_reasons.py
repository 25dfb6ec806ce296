"""The catalogue of reasons (qinglong.wire.reasons): every start-failure code a Worker makes is in it, every
entry has a message the wire takes, and a Worker's message is made to fit."""

from __future__ import annotations

import re
from pathlib import Path

from qinglong.wire.bundle import BUNDLE_CODES
from qinglong.wire.common import ERROR_CODE_PATTERN
from qinglong.wire.reasons import ENDS, MESSAGE_MAX, START_FAILED, START_FAILURES, fit, message_of, start_failure
from qinglong.wire.signing import PLAN_CODES
from qinglong.worker import bundles, delivery, executor, processor

WORKER_CODES = {
    *BUNDLE_CODES, *PLAN_CODES, bundles.CHUNK, bundles.DIGEST_MISMATCH, bundles.UNAVAILABLE, bundles.FETCH_TIMEOUT,
    delivery.SECRET_UNAVAILABLE, delivery.SECRET_FILE_REFUSED, delivery.SECRET_ENV_REFUSED,
}  # fmt: skip


def _literal_codes(module: object) -> set[str]:
    """The codes a module's source passes as a string literal (ExecutorRefused("plan.x", …), error_code="x")."""
    source = Path(module.__file__).read_text()  # type: ignore[attr-defined]
    found = re.findall(r'(?:ExecutorRefused\(\s*|_start_failed\([^"\n]*|_check_name\()"([a-z0-9_.]+)"', source)
    return set(found)


def test_every_code_a_worker_makes_is_in_the_catalogue() -> None:
    literal = _literal_codes(executor) | _literal_codes(processor)
    assert {"plan.root_not_allowed", "launch.never_started", "spawn.os_error", "offer_id.invalid"} <= literal
    assert not (WORKER_CODES | literal) - set(START_FAILURES)


def test_every_entry_is_a_code_with_a_message_the_wire_takes() -> None:
    for code, message in {**START_FAILURES, **ENDS}.items():
        assert re.fullmatch(ERROR_CODE_PATTERN, code), code
        assert 1 <= len(message) <= MESSAGE_MAX and fit(message) == message, code
    assert not set(START_FAILURES) & set(ENDS)
    assert message_of("process.killed_after_grace") == ENDS["process.killed_after_grace"]
    assert message_of("no.such_code") is None and message_of(None) is None


def test_a_worker_s_message_is_made_to_fit_and_an_unknown_code_goes_as_start_failed() -> None:
    assert start_failure("plan.user_unknown", None) == ("plan.user_unknown", START_FAILURES["plan.user_unknown"])
    assert start_failure("plan.user_unknown", "no user 'x'\non this host") == ("plan.user_unknown",
                                                                               "no user 'x' on this host")  # fmt: skip
    code, message = start_failure("brand.new_code", "x" * 500)
    assert code == START_FAILED and message.startswith("brand.new_code: x") and len(message) == MESSAGE_MAX
    assert fit("\u2028\x7f\t ") == "(no message)" and fit("a\ud800b") == "a?b"
