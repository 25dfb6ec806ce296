"""qinglong/error@v1 and the one table of its stable error codes. Touches nothing: declarations.

A code is stable API: the shell chooses it, the Worker and users branch on it, and it never carries
a secret (the message names a rule or a field path, never a value). `ERRORS` gives each code its
HTTP status, its meaning and the routes that can answer it; the shell answers with that status, and
its OpenAPI document and docs/protocol.md are generated from the same table. Database outcomes map
by rule: `fenced` + reason → `fenced.<reason>`, `invalid` + reason → `invalid.<reason>`,
`not_found` → `not_found` (a missing Offer and one of another Worker look the same, as they must),
except that ql.policy_fence's `approval_required` is the code `approval_required` (docs/architecture.md
§6: 403 for agents).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal

from qinglong.wire import codec, ql3w
from qinglong.wire.codec import BAD_ENUM, KIB, MAX_DEPTH, WireError
from qinglong.wire.fields import Enum, Message, Str, wire

ERROR_SCHEMA: Final = "qinglong/error@v1"
# The statuses of a database answer that refuses the call; outcome_code maps each to an error code.
OUTCOME_STATUSES: Final = frozenset({"invalid", "not_found", "fenced"})
REQUEST_ID_PATTERN: Final = "[A-Za-z0-9._:-]{1,128}"  # ql.security_audit.request_id is 1..128 characters

# Every `fenced` reason the ql_api functions return (ql.attempt_fence's and ql.policy_fence's included):
# exactly the database's enum ql.fence_reason, in its order (tests/integration/db/test_wire_catalogue.py).
FENCE_REASONS: Final[tuple[str, ...]] = (
    "worker_disabled",
    "certificate_mismatch",
    "stale_session",
    "session_expired",
    "stale_generation",
    "identity_mismatch",
    "stale_lease_generation",
    "token_mismatch",
    "lease_expired",
    "state_drift",
    "stale_version",
    "completion_conflict",
    "artifact_mismatch",
    "artifact_conflict",
    "subject_disabled",
    "project_archived",
    "project_changed",
    "binding_revoked",
    "binding_changed",
    "role_insufficient",
    "approval_required",  # an agent asking run.stop: the one fence whose code is `approval_required` (403)
    "mutation_conflict",
    "token_in_use",  # operators (subject_create_v1)
    "task_disabled",  # an operator disabled the task (task_status_set_v1)
    "name_taken",  # operators (subject_create_v1, worker_enroll_v1)
)
# Every `invalid` reason: mostly inputs the wire parser already refuses (a bug if the database sees
# them), plus the content checks only the database makes (size, too_large, sha256_mismatch), and the
# operator functions' inputs. Exactly the database's enum ql.invalid_reason, in its order.
INVALID_REASONS: Final[tuple[str, ...]] = (
    "phase",
    "worker_id",
    "session_id",
    "worker_generation",
    "cert_fingerprint",
    "capacity",
    "token_digest",
    "project_id",
    "run_id",
    "attempt_id",
    "offer_id",
    "lease_generation",
    "expected_version",
    "lease_version",
    "exit_code",
    "error_code",
    "artifacts",
    "kind",
    "sha256",
    "size",
    "too_large",
    "sha256_mismatch",
    "subject_id",
    "task_id",
    "mutation_id",
    "admitted_version",
    "permission",
    "route",
    "request_id",
    "role",
    "active",
    "name",  # operators (project, subject, task and Worker creation)
    "pool",
    "plan",
    "empty_token",
    "limit",  # the scheduler's convergence pages (and the run history's page size)
    "grace_ms",
    "version_id",  # Project secrets (ql/secrets, deployed right after ql/outcome_reasons)
    "sealed",
    "digest",  # bundles and plan signatures (ql/bundles, deployed right after the secrets)
    "size_bytes",
    "index",
    "data",
    "entries",
    "plan_signature",
    "revision_id",
    "status",  # the run history's filters (ql_api.run_list_v1)
    "time_range",
    "cursor",
    "cron",  # operators (task schedules: ql_api.task_schedule_set_v1)
    "cron_never_fires",
    "timezone",
    "overlap",
    "stream",  # task output (ql_api.output_append_v1, ql_api.run_output_v1)
    "offset",
    "attempt",
    "not_after",  # operators (a Worker certificate's expiry: ql_api.worker_certificate_renew_v1)
    "lease_ms",  # a pool's Lease length (ql/pool_leases), and the dispatcher's lease (ql/notify)
    "error_message",  # a start failure's message (ql_api.attempt_activation_v2)
    "events",  # notification rules (ql/notify: ql_api.notify_rule_set_v1)
    "channel",
    "url",
    "secret_name",
    "template",
    "outbox_id",  # the notification dispatcher (ql_api.notify_claim_v1, notify_result_v1)
    "attempt_no",
    "status_code",
    "error",
    "duration_ms",
    "running",  # a renewal whose running flag is NULL (ql_api.attempt_lease_control_v2)
)

FENCE_MEANINGS: Final[Mapping[str, str]] = {
    "worker_disabled": "the Worker is disabled, or was re-enrolled after this session opened",
    "certificate_mismatch": "the client certificate is not the one enrolled for this Worker",
    "stale_session": "the session is not this Worker's live session (replaced, closed or unknown)",
    "session_expired": "the session outlived its expiry without a heartbeat",
    "stale_generation": "the Worker was re-enrolled: this generation is fenced (or the body names another generation)",
    "identity_mismatch": "the offer, Run or Project does not belong to this Attempt",
    "stale_lease_generation": "the Lease generation is not the current one",
    "token_mismatch": "the lease token is not the one issued with this Offer",
    "lease_expired": "the Lease expired (database time)",
    "state_drift": "the Attempt is not in a state this call can act on",
    "stale_version": "the Lease version is not the current one (a lost or duplicated renewal)",
    "completion_conflict": "the Attempt already ended with a different completion",
    "artifact_mismatch": "the completion's receipts do not match the stored artifacts",
    "artifact_conflict": "an artifact of this kind is stored with another sha256 or size",
    "subject_disabled": "the bearer token's subject is disabled",
    "project_archived": "the Project is archived",
    "project_changed": "the Project's policy changed after admission (retry)",
    "binding_revoked": "the subject's role binding was revoked",
    "binding_changed": "the subject's role binding changed after admission (retry)",
    "role_insufficient": "the subject's role does not allow this",
    "approval_required": "an agent asked for `run.stop`: a human must do it",
    "mutation_conflict": "the mutationId was used before for a different command",
    "token_in_use": "the bearer-token digest is already registered to a subject (operators)",
    "task_disabled": "the task is disabled: no Run of it is queued until an operator enables it",
    "name_taken": "another subject or Worker already has this name (operators)",
}
# The content checks only the database makes; any other reason is an input the wire parser refuses first.
INVALID_MEANINGS: Final[Mapping[str, str]] = {
    "size": "the declared size does not match the content",
    "too_large": "the artifact is larger than the database's artifact_max_bytes",
    "sha256_mismatch": "the declared sha256 does not match the content",
    "time_range": "`sinceMs` is not before `untilMs`",
    "cursor": "the cursor is not one the run history answered",
    "cron_never_fires": "the cron expression matches no date, e.g. February 30 (operators: task schedules)",
    "url": "the URL is not http(s), or it carries a credential (user:password@, or a key, token or sign parameter): "
    "name a Project secret instead",
    "template": "a template is for a chat channel (wecom) only",
    "offset": "the output chunk starts past the stream's end before the stream's head is complete",
    "version_id": "the secret version id the shell chose is missing or already used (a shell bug)",
    "sealed": "the sealed secret value does not fit its columns (a shell bug: the value never reaches the database)",
}

Scope = Literal["any", "body", "input", "worker", "signed", "user", "sealing", "unrouted"]
"""Which routes can answer a code: any route, a route that takes a body, a route that takes a body or query
parameters ("input": the field rules both share), a Worker route, a Worker route signed with ql3w (all but
session open), a user route, a route that seals or opens Project secret values with the shell's key-encryption
keys ("sealing": a secret's set, and the activation whose starting ACK delivers them), or none ("unrouted": the
answer when a listener has no route for the request's path and method)."""
SCOPES: Final[Mapping[str, tuple[Scope, ...]]] = {
    "worker-open": ("any", "worker"),
    "worker": ("any", "worker", "signed"),
    "user": ("any", "user"),
}
"""The scopes of each route audience (qinglong.shell.routes.Route.audience); "body" and "input" are added for a
route with a body, "input" for a route with query parameters, "sealing" for a route that seals or opens secret
values (qinglong.shell.routes.Route.sealing)."""


@dataclass(frozen=True)
class ErrorCode:
    """One stable code: the HTTP status it is answered with, what it means, and which routes can answer it."""

    code: str
    status: int
    meaning: str
    scope: Scope = "any"


def _table(*entries: ErrorCode) -> Mapping[str, ErrorCode]:
    table = {entry.code: entry for entry in entries}
    if len(table) != len(entries):
        raise ValueError("the error table names a code twice")
    return MappingProxyType(table)


ERRORS: Final[Mapping[str, ErrorCode]] = _table(
    *(ErrorCode(f"fenced.{r}", 409, FENCE_MEANINGS[r]) for r in FENCE_REASONS if r != "approval_required"),
    *(
        ErrorCode(
            f"invalid.{r}",
            400,
            INVALID_MEANINGS.get(r, f"the database refused the input `{r}` (the wire parser refuses most first)"),
        )
        for r in INVALID_REASONS
    ),
    ErrorCode("auth.unauthenticated", 401, "no bearer token, an unknown one, or its subject is disabled", "user"),
    ErrorCode(
        ql3w.BAD_HEADER,
        401,
        "the `ql3w` header is malformed, names another Worker or session, or does not verify",
        "signed",
    ),
    ErrorCode(
        ql3w.EXPIRED, 401, f"the `ql3w` timestamp is more than {ql3w.SKEW_SECONDS} s from the shell's clock", "signed"
    ),
    ErrorCode(
        "auth.certificate_mismatch",
        401,
        "no verified client certificate, or it names another Worker than the path",
        "worker",
    ),
    ErrorCode(
        "request.too_large",
        413,
        "the body, counted as received (never decoded), is over the route's byte cap (refused before it is buffered)",
        "body",
    ),
    ErrorCode(
        "request.unsupported_media_type",
        415,
        "the `Content-Type` is not `application/json` (whose one allowed parameter is `charset=utf-8`), or a"
        " `Content-Encoding` other than `identity` is declared (refused before any byte is read or decoded)",
        "body",
    ),
    ErrorCode(
        "request.malformed",
        400,
        "the request line, a header or the body's framing does not parse (`Content-Length` together with"
        " `Transfer-Encoding` included); the connection is closed",
    ),
    ErrorCode(
        "request.header_too_large",
        431,
        "the head is over the listener's `max_header_bytes` or `max_header_count`; the connection is closed",
    ),
    ErrorCode(
        "request.unknown_path",
        404,
        "no route of this listener has this path (a path parameter out of pattern included)",
    ),
    ErrorCode(
        "request.method_not_allowed",
        405,
        "the path's routes take other methods, which the `Allow` header names",
        "unrouted",
    ),
    # Every wire.* code but codec.VERSION_MISMATCH: the Worker's own check of an answer, never an answer.
    ErrorCode(codec.TOO_LARGE, 413, "the body is over the message's byte cap", "body"),
    ErrorCode(codec.INVALID_UTF8, 400, "the body is not UTF-8 (or escapes a lone surrogate)", "body"),
    ErrorCode(codec.INVALID_JSON, 400, "the body is not one JSON value (NaN and Infinity included)", "body"),
    ErrorCode(codec.TOO_DEEP, 400, f"nesting deeper than {MAX_DEPTH}", "body"),
    ErrorCode(codec.DUPLICATE_KEY, 400, "an object repeats a key (or a query string a parameter)", "input"),
    ErrorCode(codec.NOT_OBJECT, 400, "the top level is not an object", "body"),
    ErrorCode(codec.UNKNOWN_FIELD, 400, "a field (or query parameter) the message does not declare", "input"),
    ErrorCode(codec.MISSING_FIELD, 400, "a required field is absent", "body"),
    ErrorCode(
        codec.BAD_TYPE,
        400,
        "a value of the wrong JSON type (or null where not allowed); a query string that is not UTF-8 name=value"
        " pairs, or an integer parameter that is not decimal digits",
        "input",
    ),
    ErrorCode(codec.OUT_OF_RANGE, 400, "an integer outside its bounds", "input"),
    ErrorCode(codec.BAD_UUID, 400, "a path id or a body field is not a canonical lower-case uuid"),
    ErrorCode(codec.CONTROL_CHARACTER, 400, "a control character or U+2028/U+2029 in a string or key", "input"),
    ErrorCode(codec.BAD_SCHEMA, 400, "`schema` is not this route's message family", "body"),
    ErrorCode(codec.BAD_ENUM, 400, "a value outside its enum", "input"),
    ErrorCode(codec.TOO_LONG, 400, "a string, array, map or query string over its maximum", "input"),
    ErrorCode(codec.TOO_SHORT, 400, "a string or array under its minimum", "input"),
    ErrorCode(
        codec.BAD_PATTERN,
        400,
        "a string that does not match its pattern (or a path project that is neither an id nor a name, or a path"
        " secret name that is not `[A-Z_][A-Z0-9_]{0,63}`)",
    ),
    ErrorCode(codec.BAD_BASE64, 400, "a token or content that is not canonical base64", "body"),
    ErrorCode("not_found", 404, "missing, or another Project's or another Worker's object"),
    ErrorCode(
        "denied", 403, "admission denied: the subject's role does not allow this, or the Project is archived", "user"
    ),
    ErrorCode("approval_required", 403, FENCE_MEANINGS["approval_required"], "user"),
    ErrorCode(
        "storage.unavailable",
        503,
        "the database cannot be reached, is shutting down, refuses connections or is read-only (a failover); retry it",
    ),
    ErrorCode(
        "storage.conflict",
        503,
        "the transaction kept conflicting with concurrent ones (serialization failure or deadlock) after the"
        " shell's own retries; retry it",
    ),
    ErrorCode(
        "storage.partition_missing",
        503,
        "a time-partitioned table (run events, the security audit) has no partition for now: partition maintenance"
        " (convergence, the retention cycle) has not run for over a year; /healthz warned ten months earlier"
        ' (docs/operations.md, "Retention")',
    ),
    ErrorCode(
        "secrets.unconfigured",
        503,
        "this shell holds no key-encryption key (shell.toml has no `[secrets]`), so it can neither seal nor open"
        " a secret value; another shell may",
        "sealing",
    ),
    ErrorCode(
        "secrets.unknown_kek",
        503,
        "a secret value is sealed under a key-encryption key this shell does not hold (a rotation not finished"
        " here: `accepted_kek_files`); another shell, or this one after a reload, may",
        "sealing",
    ),
    ErrorCode(
        "secrets.tampered",
        500,
        "a stored secret value does not authenticate under its key (altered, or moved to another Project, name or"
        " version): it is never delivered",
        "sealing",
    ),
    ErrorCode("internal.bad_projection", 503, "the database answered outside the response contract (never forwarded)"),
    ErrorCode(
        "internal.error",
        500,
        "a bug: in the shell (logged with its type only) or a database error that is not about availability"
        " or conflict (logged with its SQLSTATE only)",
    ),
)
ERROR_CODES: Final[tuple[str, ...]] = tuple(ERRORS)


def route_errors(audience: str, *, body: bool, query: bool = False, sealing: bool = False) -> tuple[ErrorCode, ...]:
    """The codes a route can answer: its audience ("worker-open", "worker" or "user"), whether it takes a body
    or query parameters, and whether it seals or opens secret values."""
    scopes = (
        *SCOPES[audience],
        *(("body",) if body else ()),
        *(("input",) if body or query else ()),
        *(("sealing",) if sealing else ()),
    )
    return tuple(error for error in ERRORS.values() if error.scope in scopes)


class ErrorMessage(Message):
    """Every non-2xx body: a stable code, a short message and, when known, the request id."""

    SCHEMA = ERROR_SCHEMA
    CAP = 4 * KIB

    code: str = wire(Enum(ERROR_CODES))
    message: str = wire(Str(200, min_len=1))
    request_id: str | None = wire(Str(128, min_len=1, pattern=REQUEST_ID_PATTERN), optional=True, default=None)


def outcome_code(result: Mapping[str, object]) -> str:
    """The error code of a database outcome {"status": "invalid"|"fenced"|"not_found", "reason": …}."""
    status, reason = result.get("status"), result.get("reason")
    if status == "not_found":
        return "not_found"
    if status == "fenced" and reason == "approval_required":
        return "approval_required"
    code = f"{status}.{reason}" if status in OUTCOME_STATUSES and isinstance(reason, str) else ""
    if code not in ERROR_CODES:
        raise WireError(BAD_ENUM, "database outcome has no stable error code")
    return code


def error_from_wire_error(error: WireError, *, request_id: str | None = None) -> ErrorMessage:
    """The error body for a refused request (its code is one of the wire.* codes)."""
    return ErrorMessage(code=error.code, message=error.message, request_id=request_id)


MESSAGES: Final[tuple[type[Message], ...]] = (ErrorMessage,)
