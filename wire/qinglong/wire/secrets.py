"""qinglong/secret@v1: a user sets, deletes and lists a Project's secrets. Touches nothing: declarations.

A secret is a name (an environment-variable name, `SECRET_NAME_PATTERN`, in the path) and a value of 1 byte to
64 KiB, any bytes, carried as base64 only in the body of a set. The shell seals the value before it reaches the
database (docs/decisions/0015-secrets.md), and no answer, error or log carries it back: a set answers the
version it made, a list names, versions, sizes, who and when. Each set makes a new immutable version. The body's
mutationId makes a retried set or delete idempotent: a set answers `set` (202, this call made the version) or
`already_set` (200, the same mutation replayed: the version it made then); a delete answers `deleted` (202) or
`already_deleted` (200, the secret was deleted before), and a replayed delete its first answer. Fences, denials
and not-found (another Project's secret, or a name never set) travel as qinglong/error@v1.
"""

from __future__ import annotations

from typing import Final, Literal

from qinglong.wire.cancellation import MUTATION_ID_PATTERN
from qinglong.wire.codec import KIB
from qinglong.wire.common import SECRET_NAME_PATTERN, SECRET_VALUE_MAX_BYTES, TIME_MS
from qinglong.wire.fields import Base64Bytes, Enum, Int, List, Message, Nested, Record, Str, Uuid, Variants, wire

SECRET_SCHEMA: Final = "qinglong/secret@v1"  # noqa: S105  (a schema name, not a secret)
SECRETS_MAX: Final = 1000  # the most a list answers (a Project's secrets; far above any panel's)
MUTATION_ID: Final = Str(128, min_len=1, pattern=MUTATION_ID_PATTERN)
SECRET_NAME: Final = Str(64, min_len=1, pattern=SECRET_NAME_PATTERN)


class SecretSetRequest(Message):
    """Body of a set (PUT …/secrets/{name}): the value and the caller's mutation id."""

    SCHEMA = SECRET_SCHEMA
    CAP = 96 * KIB

    mutation_id: str = wire(MUTATION_ID)
    value: bytes = wire(Base64Bytes(SECRET_VALUE_MAX_BYTES, min_bytes=1), secret=True)


class SecretSet(Message):
    """This call made a new version."""

    SCHEMA = SECRET_SCHEMA
    CAP = 4 * KIB

    status: Literal["set"] = wire(Enum(("set",)), default="set")
    name: str = wire(SECRET_NAME)
    version: int = wire(Int(1))
    size: int = wire(Int(1, SECRET_VALUE_MAX_BYTES))
    set_at_ms: int = wire(TIME_MS)


class SecretAlreadySet(Message):
    """The same mutation was replayed: the version it made then."""

    SCHEMA = SECRET_SCHEMA
    CAP = 4 * KIB

    status: Literal["already_set"] = wire(Enum(("already_set",)), default="already_set")
    name: str = wire(SECRET_NAME)
    version: int = wire(Int(1))
    size: int = wire(Int(1, SECRET_VALUE_MAX_BYTES))
    set_at_ms: int = wire(TIME_MS)


class SecretDeleteRequest(Message):
    """Body of a delete (POST …/secrets/{name}/deletion): the caller's mutation id."""

    SCHEMA = SECRET_SCHEMA
    CAP = 4 * KIB

    mutation_id: str = wire(MUTATION_ID)


class SecretDeleted(Message):
    """This call deleted the secret (or a replay of the call that did)."""

    SCHEMA = SECRET_SCHEMA
    CAP = 4 * KIB

    status: Literal["deleted"] = wire(Enum(("deleted",)), default="deleted")
    name: str = wire(SECRET_NAME)


class SecretAlreadyDeleted(Message):
    """The secret was deleted before this call."""

    SCHEMA = SECRET_SCHEMA
    CAP = 4 * KIB

    status: Literal["already_deleted"] = wire(Enum(("already_deleted",)), default="already_deleted")
    name: str = wire(SECRET_NAME)


class SecretEntry(Record):
    """One current secret: never its value."""

    name: str = wire(SECRET_NAME)
    version: int = wire(Int(1))
    size: int = wire(Int(1, SECRET_VALUE_MAX_BYTES))
    set_by: str = wire(Str(128, min_len=1))
    set_at_ms: int = wire(TIME_MS)
    created_at_ms: int = wire(TIME_MS)


class SecretList(Message):
    """ql_api.secret_list_v1: a Project's current secrets, by name."""

    SCHEMA = SECRET_SCHEMA
    CAP = 512 * KIB

    status: Literal["listed"] = wire(Enum(("listed",)), default="listed")
    project_id: str = wire(Uuid())
    project: str = wire(Str(128, min_len=1))
    secrets: tuple[SecretEntry, ...] = wire(List(Nested(SecretEntry), max_items=SECRETS_MAX))


SecretSetResponse = SecretSet | SecretAlreadySet
SECRET_SET_RESPONSES: Final[Variants[SecretSetResponse]] = Variants(SecretSet, SecretAlreadySet)
SecretDeleteResponse = SecretDeleted | SecretAlreadyDeleted
SECRET_DELETE_RESPONSES: Final[Variants[SecretDeleteResponse]] = Variants(SecretDeleted, SecretAlreadyDeleted)

MESSAGES: Final[tuple[type[Message], ...]] = (
    SecretSetRequest,
    SecretSet,
    SecretAlreadySet,
    SecretDeleteRequest,
    SecretDeleted,
    SecretAlreadyDeleted,
    SecretList,
)
