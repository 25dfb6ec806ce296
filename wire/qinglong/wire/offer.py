"""qinglong/remote-offer@v1: a Worker pulls one offer. Touches nothing: declarations.

Pull: a body with the pull's id (persisted by the Worker before it sends, so a replay after a lost
answer is recognised). The answer is ql_api.offer_pull_v1's result: `offered` with its exact `offer`
object (ids, attempt number, lease generation/version/expiry, offer expiry and the pinned plan exactly
as ql.plan_is_valid admits it) plus, beside it, the raw `leaseToken` the shell made (the database only
ever sees its SHA-256), or `empty` with the reason. `parse_offer_response` dispatches on `status`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal, get_args

from qinglong.wire.codec import KIB
from qinglong.wire.common import MAX_INT32, SECRET_NAME_PATTERN, SECRET_REFS_MAX, SHA256_HEX, TIME_MS
from qinglong.wire.fields import (
    Base64Bytes,
    Enum,
    Int,
    List,
    Map,
    Message,
    Nested,
    Record,
    Str,
    Token,
    Uuid,
    Variants,
    wire,
)

OFFER_SCHEMA: Final = "qinglong/remote-offer@v1"
EmptyReason = Literal["no_work", "at_capacity", "pull_spent"]
# The plan's own limits (the wire's; ql.plan_is_valid bounds argv to 256 items but not lengths).
ARGV_MAX_ITEMS: Final = 256
ARG_MAX_CHARS: Final = 4096
ENV_MAX_ENTRIES: Final = 256
ENV_NAME_MAX_CHARS: Final = 256
ENV_VALUE_MAX_CHARS: Final = 4096
POOL_PATTERN: Final = "[a-z0-9_-]{1,64}"
CWD_MAX_CHARS: Final = 4096
ACCOUNT_PATTERN: Final = "[a-z_][a-z0-9_-]{0,31}"  # a user or group name (a name, never a number)
SECRET_ENV_NAME_PATTERN: Final = "[A-Za-z_][A-Za-z0-9_]{0,127}"  # noqa: S105  a variable a secret is put in
# A file a secret is written to, relative to the Run's directory: segments of [A-Za-z0-9._-], none . or ..
SECRET_FILE_PATTERN: Final = r"(?!\.{1,2}(?:/|$))[A-Za-z0-9._-]+(?:/(?!\.{1,2}(?:/|$))[A-Za-z0-9._-]+)*"  # noqa: S105
SECRET_FILE_MAX_CHARS: Final = 255
KEY_ID_PATTERN: Final = "[0-9a-f]{16}"  # an operator key's id: SHA-256 of its raw public key, 16 hex characters
SIGNATURE_BYTES: Final = 64  # Ed25519


class Plan(Record):
    """A task revision's immutable plan. Absent keys stay absent (no timeout = no timeoutMs). `cwd`,
    `user` and `group` are requests the Worker may refuse (a typed start failure, nothing spawned):
    a relative `cwd` lies inside the Run's own directory, an absolute one needs the Worker's consent,
    and a user or group must be on the Worker's `run_as` / `run_as_groups` allow-list. `secretEnv` and
    `secretFiles` name Project secrets, never values: the starting ACK's answer delivers their values.
    `bundle` names an archive of files (qinglong.wire.bundle) the Worker fetches and unpacks into the Run's
    directory before the spawn."""

    argv: tuple[str, ...] = wire(List(Str(ARG_MAX_CHARS), max_items=ARGV_MAX_ITEMS, min_items=1))
    env: Mapping[str, str] | None = wire(
        Map(
            Str(ENV_NAME_MAX_CHARS, min_len=1, pattern="[^=]+"),
            Str(ENV_VALUE_MAX_CHARS),
            max_items=ENV_MAX_ENTRIES,
        ),
        optional=True,
        default=None,
    )
    timeout_ms: int | None = wire(Int(1, MAX_INT32), optional=True, default=None)
    lease_ms: int | None = wire(Int(1000, 3_600_000), optional=True, default=None)  # the control plane's: not read here
    max_attempts: int | None = wire(Int(1, 100), optional=True, default=None)
    retry_backoff_ms: int | None = wire(Int(0, MAX_INT32), optional=True, default=None)
    pool: str | None = wire(Str(64, min_len=1, pattern=POOL_PATTERN), optional=True, default=None)
    cwd: str | None = wire(Str(CWD_MAX_CHARS, min_len=1), optional=True, default=None)
    user: str | None = wire(Str(32, min_len=1, pattern=ACCOUNT_PATTERN), optional=True, default=None)
    group: str | None = wire(Str(32, min_len=1, pattern=ACCOUNT_PATTERN), optional=True, default=None)
    secret_env: Mapping[str, str] | None = wire(
        Map(Str(128, min_len=1, pattern=SECRET_ENV_NAME_PATTERN), Str(64, min_len=1, pattern=SECRET_NAME_PATTERN),
            max_items=SECRET_REFS_MAX),
        optional=True,
        default=None,
    )  # fmt: skip
    secret_files: Mapping[str, str] | None = wire(
        Map(Str(SECRET_FILE_MAX_CHARS, min_len=1, pattern=SECRET_FILE_PATTERN),
            Str(64, min_len=1, pattern=SECRET_NAME_PATTERN), max_items=SECRET_REFS_MAX),
        optional=True,
        default=None,
    )  # fmt: skip
    bundle: str | None = wire(SHA256_HEX, optional=True, default=None)  # the scripts' archive, by its SHA-256

    def secret_names(self) -> frozenset[str]:
        """The secrets this plan names (ql.plan_secret_names)."""
        return frozenset((*(self.secret_env or {}).values(), *(self.secret_files or {}).values()))


class PlanSignature(Record):
    """An operator key's signature of a plan (qinglong.wire.signing): which key (its id) and the 64-byte Ed25519
    signature."""

    key_id: str = wire(Str(16, min_len=16, pattern=KEY_ID_PATTERN))
    signature: bytes = wire(Base64Bytes(SIGNATURE_BYTES, min_bytes=SIGNATURE_BYTES))


class Offer(Record):
    """The offer object of ql_api.offer_pull_v1; `planSignature` only when the revision was signed."""

    offer_id: str = wire(Uuid())
    project_id: str = wire(Uuid())
    run_id: str = wire(Uuid())
    attempt_id: str = wire(Uuid())
    attempt_no: int = wire(Int(1, 100))
    lease_generation: int = wire(Int(1))
    lease_version: int = wire(Int(1))
    offered_at_ms: int = wire(TIME_MS)
    lease_expires_at_ms: int = wire(TIME_MS)
    offer_expires_at_ms: int = wire(TIME_MS)
    plan: Plan = wire(Nested(Plan))
    plan_signature: PlanSignature | None = wire(Nested(PlanSignature), optional=True, default=None)


class OfferPullRequest(Message):
    """Body of a pull: the id the Worker persisted before sending it, so a pull replayed after a lost
    answer gets the same offer (or `pull_spent`), never a second claim. Worker, session and generation
    are bound by the path and session."""

    SCHEMA = OFFER_SCHEMA
    CAP = 4 * KIB

    pull_id: str = wire(Uuid())


class OfferOffered(Message):
    """An offer and its raw lease token: the only response that ever carries a lease token."""

    SCHEMA = OFFER_SCHEMA
    CAP = 128 * KIB

    status: Literal["offered"] = wire(Enum(("offered",)), default="offered")
    offer: Offer = wire(Nested(Offer))
    lease_token: str = wire(Token(), from_shell=True, secret=True)


class OfferEmpty(Message):
    """Nothing offered: no queued work in the pool, the session is at capacity, or the replayed pull
    id's offer can no longer be handed out (`pull_spent`: it started, ended or expired)."""

    SCHEMA = OFFER_SCHEMA
    CAP = 128 * KIB

    status: Literal["empty"] = wire(Enum(("empty",)), default="empty")
    reason: EmptyReason = wire(Enum(get_args(EmptyReason)))


OfferResponse = OfferOffered | OfferEmpty
OFFER_RESPONSES: Final[Variants[OfferResponse]] = Variants(OfferOffered, OfferEmpty)


def parse_offer_response(data: bytes) -> OfferResponse:
    """Parse a pull answer (≤ 128 KiB) into OfferOffered or OfferEmpty."""
    return OFFER_RESPONSES.parse(data)


MESSAGES: Final[tuple[type[Message], ...]] = (OfferPullRequest, OfferOffered, OfferEmpty)
