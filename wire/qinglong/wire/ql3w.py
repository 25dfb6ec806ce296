"""The ql3w request signature shared by the Worker (signs) and the shell (verifies). Touches nothing.

    Authorization: ql3w worker=<uuid>, session=<uuid>, gen=<int>, ts=<unix seconds>, sig=<base64url>
    sig = HMAC-SHA256(session_key, "ql3w\\n" + METHOD + "\\n" + path + "\\n" + sha256hex(body) + "\\n" + ts)
    session_key = HMAC-SHA256(cluster_secret, "ql3w-session\\n" + session ‖ "\\n" + worker ‖ "\\n" + gen)

The session key is derived, never stored: any shell replica that holds the cluster secret verifies
a request statelessly, and the database never sees the key. `gen` (the Worker generation the
session was opened under) is in the header because the key depends on it; docs/architecture.md §6 lists
the other four parameters. Timestamps are accepted within ±60 s of the verifier's clock.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from dataclasses import dataclass
from typing import Final

from qinglong.wire.codec import MAX_SAFE_INTEGER, WireError

SCHEME: Final = "ql3w"
SKEW_SECONDS: Final = 60
BAD_HEADER: Final = "auth.bad_signature"
EXPIRED: Final = "auth.expired_timestamp"

_UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_HEADER = re.compile(
    rf"ql3w worker=(?P<worker>{_UUID}), session=(?P<session>{_UUID}), gen=(?P<gen>[1-9][0-9]{{0,15}}), "
    r"ts=(?P<ts>[1-9][0-9]{0,11}), sig=(?P<sig>[A-Za-z0-9_-]{43})"
)


@dataclass(frozen=True)
class Credential:
    """The parsed Authorization header (its signature not yet verified)."""

    worker_id: str
    session_id: str
    generation: int
    timestamp: int
    signature: str


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def session_key(cluster_secret: bytes, session_id: str, worker_id: str, generation: int) -> bytes:
    """The session's signing key, derived from the cluster secret (never stored anywhere)."""
    message = f"ql3w-session\n{session_id}\n{worker_id}\n{generation}".encode("ascii")
    return hmac.new(cluster_secret, message, hashlib.sha256).digest()


def canonical_request(method: str, path: str, body: bytes, timestamp: int) -> bytes:
    digest = hashlib.sha256(body).hexdigest()
    return f"{SCHEME}\n{method.upper()}\n{path}\n{digest}\n{timestamp}".encode()


def sign(key: bytes, method: str, path: str, body: bytes, timestamp: int) -> str:
    return b64url(hmac.new(key, canonical_request(method, path, body, timestamp), hashlib.sha256).digest())


def authorization(
    key: bytes,
    *,
    worker_id: str,
    session_id: str,
    generation: int,
    method: str,
    path: str,
    body: bytes,
    now: int,
) -> str:
    """The Authorization header value a Worker sends for one request."""
    sig = sign(key, method, path, body, now)
    return f"{SCHEME} worker={worker_id}, session={session_id}, gen={generation}, ts={now}, sig={sig}"


def parse(header: str) -> Credential:
    """Parse an Authorization header exactly; anything else is `auth.bad_signature`."""
    m = _HEADER.fullmatch(header)
    if m is None or int(m["gen"]) > MAX_SAFE_INTEGER:
        raise WireError(BAD_HEADER, "malformed ql3w authorization")
    return Credential(m["worker"], m["session"], int(m["gen"]), int(m["ts"]), m["sig"])


def verify(cluster_secret: bytes, credential: Credential, method: str, path: str, body: bytes, now: int) -> None:
    """Check the timestamp window, then the signature in constant time; raise WireError otherwise."""
    if abs(now - credential.timestamp) > SKEW_SECONDS:
        raise WireError(EXPIRED, "ql3w timestamp outside the accepted window")
    key = session_key(cluster_secret, credential.session_id, credential.worker_id, credential.generation)
    expected = sign(key, method, path, body, credential.timestamp)
    if not hmac.compare_digest(expected, credential.signature):
        raise WireError(BAD_HEADER, "ql3w signature does not verify")
