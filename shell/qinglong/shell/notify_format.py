"""What a notification looks like on the wire, per channel, and how a webhook receiver checks it. Touches nothing:
pure functions of a claimed notification, a key and a clock.

Generic webhook (channel "webhook"): POST the rule's URL with a JSON body and four headers

    Content-Type: application/json
    X-Qinglong-Event: run.failed                     the event kind
    X-Qinglong-Delivery: 6f1c…-…                     the notification id: the idempotency key, the same on every retry
    X-Qinglong-Timestamp: 1796219102                 unix seconds when this attempt was signed
    X-Qinglong-Signature: v1=<64 hex>                HMAC-SHA256(key, timestamp + "." + body), key = the rule's secret

A receiver verifies (`verify`): the timestamp is a decimal integer within WINDOW_S (300 s) of its own clock; the
signature equals HMAC-SHA256(key, f"{timestamp}.".encode() + raw body) by a constant-time comparison (any "v1="
entry of a comma-separated list, so a key rotation can send two); then it deduplicates by X-Qinglong-Delivery,
remembering each id for at least the window: a replay of a captured request inside the window repeats an id it
has seen, and one outside the window fails the timestamp check. Delivery is at least once, so a receiver must
treat a repeated id as done (answer 2xx) without acting again.

WeCom group robot (channel "wecom", 企业微信群机器人): POST <robot endpoint>?key=<the rule's secret> with
{"msgtype": "text", "text": {"content": <the rule's template, rendered>}}; WeCom answers HTTP 200 with
{"errcode": 0} on success, and any other errcode is a failure (45009: rate limited). The key is in the URL, so
the URL is never logged or recorded anywhere: errors are codes (`Failure.code`).

A template names fields in braces: {event} {project} {task} {run} {reason} {attempt} {worker} {at}; anything else
is left as written. The default is DEFAULT_TEMPLATE.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

WINDOW_S: Final = 300
SIGNATURE_HEADER: Final = "X-Qinglong-Signature"
TIMESTAMP_HEADER: Final = "X-Qinglong-Timestamp"
DELIVERY_HEADER: Final = "X-Qinglong-Delivery"
EVENT_HEADER: Final = "X-Qinglong-Event"
WECOM_URL: Final = "https://qyapi.weixin.qq.com/cgi-bin/webhook/send"
DEFAULT_TEMPLATE: Final = "[Qinglong] {project}/{task}: {event} (run {run}{reason})"
_FIELD: Final = re.compile(r"\{(event|project|task|run|reason|attempt|worker|at)\}")


@dataclass(frozen=True)
class Request:
    """One HTTP request to make: its URL (may hold a key: never log it), headers and body."""

    url: str
    headers: Mapping[str, str]
    body: bytes


def signature(key: bytes, timestamp: int, body: bytes) -> str:
    """The X-Qinglong-Signature value: v1= and the hex HMAC-SHA256 of timestamp "." body under key."""
    return "v1=" + hmac.new(key, str(timestamp).encode("ascii") + b"." + body, hashlib.sha256).hexdigest()


def verify(key: bytes, timestamp: str | None, signatures: str | None, body: bytes, *, now: float | None = None) -> bool:
    """A receiver's check of one request: a timestamp within WINDOW_S of `now` and a matching v1 signature.
    Deduplicating by the delivery id (for at least the window) is the receiver's other half."""
    if timestamp is None or signatures is None or not re.fullmatch(r"[0-9]{1,12}", timestamp):
        return False
    if abs((time.time() if now is None else now) - int(timestamp)) > WINDOW_S:
        return False
    expected = signature(key, int(timestamp), body)
    return any(hmac.compare_digest(expected, given.strip()) for given in signatures.split(","))


def fields(item: Mapping[str, Any]) -> dict[str, str]:
    """The template fields of a claimed notification (ql_api.notify_claim_v1's item)."""
    payload = item.get("payload") or {}
    reason = payload.get("reason")
    at_ms = payload.get("atMs", item.get("createdAtMs"))
    at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at_ms / 1000)) if isinstance(at_ms, int) else ""
    return {
        "event": str(item.get("kind", "")),
        "project": str(item.get("project", "")),
        "task": str(item.get("task") or payload.get("taskId") or "-"),
        "run": str(payload.get("runId", "-"))[:8],
        "reason": f", {reason}" if reason else "",
        "attempt": str(payload.get("attemptNo", "")),
        "worker": str(payload.get("worker", "")),
        "at": at,
    }


def render(template: str | None, item: Mapping[str, Any]) -> str:
    """The template with its known fields filled in (an unknown {name} stays as written)."""
    values = fields(item)
    return _FIELD.sub(lambda m: values[m.group(1)], template or DEFAULT_TEMPLATE)


def body_of(item: Mapping[str, Any]) -> bytes:
    """The webhook body: the notification's id, event, Project, task, when, which attempt, and the event's facts."""
    return json.dumps(
        {
            "id": item["id"],
            "event": item["kind"],
            "project": item.get("project"),
            "task": item.get("task"),
            "createdAtMs": item.get("createdAtMs"),
            "attempt": item.get("attemptNo"),
            "data": item.get("payload") or {},
        },
        separators=(",", ":"),
        sort_keys=True,
    ).encode()


def webhook(item: Mapping[str, Any], key: bytes, *, now: float | None = None) -> Request:
    """The signed webhook request of a claimed notification."""
    body = body_of(item)
    timestamp = int(time.time() if now is None else now)
    headers = {
        "Content-Type": "application/json",
        EVENT_HEADER: str(item["kind"]),
        DELIVERY_HEADER: str(item["id"]),
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: signature(key, timestamp, body),
    }
    return Request(str(item["url"]), headers, body)


def wecom(item: Mapping[str, Any], key: bytes, *, endpoint: str = WECOM_URL) -> Request:
    """The WeCom robot request: the key as the endpoint's `key` query parameter, the rendered text as the body."""
    content = render(item.get("template"), item)
    body = json.dumps({"msgtype": "text", "text": {"content": content}}, ensure_ascii=False).encode()
    try:
        token = key.decode("ascii").strip()
    except UnicodeDecodeError:
        token = ""
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,128}", token):
        raise ValueError("the WeCom robot key is not a key")  # says nothing of the value
    headers = {"Content-Type": "application/json", DELIVERY_HEADER: str(item["id"])}
    return Request(f"{endpoint}?key={token}", headers, body)


def wecom_failure(answer: bytes) -> str | None:
    """None when a WeCom answer (HTTP 200) says errcode 0; otherwise a stable error code."""
    try:
        errcode = json.loads(answer).get("errcode")
    except (ValueError, AttributeError):
        return "wecom.bad_answer"
    if errcode == 0:
        return None
    return f"wecom.errcode:{int(errcode)}" if isinstance(errcode, int) else "wecom.bad_answer"
