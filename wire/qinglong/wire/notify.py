"""qinglong/notify@v1: a Project's notification rules and its notifications' history. Touches nothing: declarations.

A user sets, removes and lists a Project's notification rules and reads its notifications' delivery history.

A rule is a name (lowercase, `RULE_NAME_PATTERN`, in the path), the events it notifies (`EVENTS`), a channel
(`webhook` with a URL, or `wecom`, a WeCom group robot, with no URL) and the NAME of the Project secret that keys
it (a webhook's HMAC-SHA256 signing key, a robot's key), never a value; a wecom rule may carry a message template.
A set answers `created` (202), `updated` (202, same rule id) or `unchanged` (200); a remove answers `removed`
(202) with how many pending notifications it dropped. Setting and removing is for operators (`run.start`),
reading for every role (`run.read`). Fences, denials and not-found (a secret the Project does not have, a rule
never set) travel as qinglong/error@v1. How a notification is delivered and signed: docs/operations.md
("Notifications") and qinglong.shell.notify_format.
"""

from __future__ import annotations

from typing import Final, Literal

from qinglong.wire.codec import KIB
from qinglong.wire.common import SECRET_NAME_PATTERN, TIME_MS
from qinglong.wire.fields import Bool, Enum, Int, List, Message, Nested, Record, Str, Uuid, wire
from qinglong.wire.query import Query

NOTIFY_SCHEMA: Final = "qinglong/notify@v1"
RULE_NAME_PATTERN: Final = "[a-z0-9][a-z0-9._-]{0,63}"
EVENTS: Final = ("run.failed", "run.timed_out", "run.cancelled", "run.succeeded_after_failure", "run.lost",
                 "worker.offline", "schedule.skipped")  # fmt: skip
CHANNELS: Final = ("webhook", "wecom")
STATES: Final = ("pending", "delivered", "dead", "dropped")
RULES_MAX: Final = 1000
HISTORY_MAX: Final = 200
RULE_NAME: Final = Str(64, min_len=1, pattern=RULE_NAME_PATTERN)
URL: Final = Str(2048, min_len=10, pattern="https?://[!-~]+")
TEMPLATE: Final = Str(2000, min_len=1)


class NotifyRuleSetRequest(Message):
    """Body of a set (PUT …/notify-rules/{name}): the whole rule."""

    SCHEMA = NOTIFY_SCHEMA
    CAP = 16 * KIB

    events: tuple[str, ...] = wire(List(Enum(EVENTS), max_items=len(EVENTS)))
    channel: str = wire(Enum(CHANNELS))
    url: str | None = wire(URL, optional=True, default=None)  # webhook only
    secret_name: str = wire(Str(64, min_len=1, pattern=SECRET_NAME_PATTERN))
    template: str | None = wire(TEMPLATE, optional=True, default=None)  # wecom only


class NotifyRuleSet(Message):
    """This call created or changed the rule, or found it as asked."""

    SCHEMA = NOTIFY_SCHEMA
    CAP = 4 * KIB

    status: str = wire(Enum(("created", "updated", "unchanged")))
    rule_id: str = wire(Uuid())
    name: str = wire(RULE_NAME)


class NotifyRuleRemoveRequest(Message):
    """Body of a remove (POST …/notify-rules/{name}/removal): nothing but the schema."""

    SCHEMA = NOTIFY_SCHEMA
    CAP = 4 * KIB


class NotifyRuleRemoved(Message):
    """The rule is gone; its pending notifications were dropped (its history stays)."""

    SCHEMA = NOTIFY_SCHEMA
    CAP = 4 * KIB

    status: Literal["removed"] = wire(Enum(("removed",)), default="removed")
    name: str = wire(RULE_NAME)
    dropped: int = wire(Int(0))


class NotifyRule(Record):
    """One live rule: never a secret's value."""

    name: str = wire(RULE_NAME)
    events: tuple[str, ...] = wire(List(Enum(EVENTS), max_items=len(EVENTS)))
    channel: str = wire(Enum(CHANNELS))
    url: str | None = wire(URL, optional=True, default=None)
    secret_name: str = wire(Str(64, min_len=1, pattern=SECRET_NAME_PATTERN))
    template: str | None = wire(TEMPLATE, optional=True, default=None)
    created_at_ms: int = wire(TIME_MS)
    updated_at_ms: int = wire(TIME_MS)
    pending: int = wire(Int(0))


class NotifyRuleList(Message):
    """ql_api.notify_rule_list_v1: a Project's live rules, by name."""

    SCHEMA = NOTIFY_SCHEMA
    CAP = 4096 * KIB

    status: Literal["listed"] = wire(Enum(("listed",)), default="listed")
    project_id: str = wire(Uuid())
    project: str = wire(Str(128, min_len=1))
    rules: tuple[NotifyRule, ...] = wire(List(Nested(NotifyRule), max_items=RULES_MAX))


class NotifyDeliveriesQuery(Query):
    """The filters of the history: one rule (a removed one's too) and how many notifications (absent: 50)."""

    rule: str | None = wire(RULE_NAME, optional=True, default=None)
    limit: int | None = wire(Int(1, HISTORY_MAX), optional=True, default=None)


class NotifyAttempt(Record):
    """One delivery attempt: the receiver's HTTP status and/or a stable error code, how long it took."""

    attempt_no: int = wire(Int(1))
    ok: bool = wire(Bool())
    status_code: int | None = wire(Int(100, 599), optional=True, default=None)
    error: str | None = wire(Str(64, min_len=1, pattern="[a-z0-9_.:]+"), optional=True, default=None)
    duration_ms: int = wire(Int(0))
    at_ms: int = wire(TIME_MS)


class NotifyNotification(Record):
    """One notification: its id (the idempotency key receivers see), rule, event, state and attempts."""

    id: str = wire(Uuid())
    rule: str = wire(RULE_NAME)
    kind: str = wire(Enum(EVENTS))
    state: str = wire(Enum(STATES))
    attempts: int = wire(Int(0))
    created_at_ms: int = wire(TIME_MS)
    next_attempt_at_ms: int | None = wire(TIME_MS, optional=True, default=None)  # pending only
    ended_at_ms: int | None = wire(TIME_MS, optional=True, default=None)
    run_id: str | None = wire(Uuid(), optional=True, default=None)
    task_id: str | None = wire(Uuid(), optional=True, default=None)
    deliveries: tuple[NotifyAttempt, ...] = wire(List(Nested(NotifyAttempt), max_items=1000))


class NotifyDeliveries(Message):
    """ql_api.notify_deliveries_v1: a Project's latest notifications, newest first."""

    SCHEMA = NOTIFY_SCHEMA
    CAP = 8192 * KIB

    status: Literal["listed"] = wire(Enum(("listed",)), default="listed")
    project_id: str = wire(Uuid())
    project: str = wire(Str(128, min_len=1))
    notifications: tuple[NotifyNotification, ...] = wire(List(Nested(NotifyNotification), max_items=HISTORY_MAX))


MESSAGES: Final[tuple[type[Message], ...]] = (
    NotifyRuleSetRequest,
    NotifyRuleSet,
    NotifyRuleRemoveRequest,
    NotifyRuleRemoved,
    NotifyRuleList,
    NotifyDeliveries,
)
