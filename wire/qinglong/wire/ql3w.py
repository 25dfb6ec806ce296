"""The ql3w request signature shared by the Worker (signs) and the shell (verifies). Touches nothing.

    Authorization: ql3w worker=<uuid>, session=<uuid>, gen=<int>[, kid=<key id>], ts=<unix seconds>, sig=<base64url>
    sig = HMAC-SHA256(session_key, "ql3w\\n" + METHOD + "\\n" + path + "\\n" + sha256hex(body) + "\\n" + ts)
    session_key = HMAC-SHA256(cluster_secret, "ql3w-session\\n" + session ‖ "\\n" + worker ‖ "\\n" + gen)
    key id = base64url(HMAC-SHA256(cluster_secret, "ql3w-key-id")[:9])   (12 characters)

The session key is derived, never stored: any shell replica that holds the cluster secret verifies
a request statelessly, and the database never sees the key. `gen` (the Worker generation the
session was opened under) is in the header because the key depends on it; docs/architecture.md §6 lists
the other four parameters. Timestamps are accepted within ±60 s of the verifier's clock.

Rotation (docs/decisions/0012-credential-rotation.md): a shell holds a Keyring, the current secret
(which keys every new session) and at most one more that it still accepts. The key id names the secret
a session's key was derived from, so the verifier computes one HMAC, never one per secret it holds; a
header without `kid` (a Worker of an earlier release) names the current secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from dataclasses import dataclass
from typing import Final

from qinglong.wire.codec import MAX_SAFE_INTEGER, WireError
from qinglong.wire.specs import UUID_PATTERN

SCHEME: Final = "ql3w"
SKEW_SECONDS: Final = 60
KEY_ID_HEADER: Final = "Qinglong-Key-Id"  # on a session-open answer: the key id to sign that session with
REKEY_HEADER: Final = "Qinglong-Rekey"  # "1" on an answer to a request signed under an accepted, not current, secret
BAD_HEADER: Final = "auth.bad_signature"
EXPIRED: Final = "auth.expired_timestamp"

KEY_ID: Final = re.compile(r"[A-Za-z0-9_-]{12}")
_HEADER = re.compile(
    rf"ql3w worker=(?P<worker>{UUID_PATTERN}), session=(?P<session>{UUID_PATTERN}), gen=(?P<gen>[1-9][0-9]{{0,15}}), "
    r"(?:kid=(?P<kid>[A-Za-z0-9_-]{12}), )?ts=(?P<ts>[1-9][0-9]{0,11}), sig=(?P<sig>[A-Za-z0-9_-]{43})"
)


@dataclass(frozen=True)
class Credential:
    """The parsed Authorization header (its signature not yet verified)."""

    worker_id: str
    session_id: str
    generation: int
    timestamp: int
    signature: str
    key_id: str | None = None  # None: the verifier's current secret


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def session_key(cluster_secret: bytes, session_id: str, worker_id: str, generation: int) -> bytes:
    """The session's signing key, derived from the cluster secret (never stored anywhere)."""
    message = f"ql3w-session\n{session_id}\n{worker_id}\n{generation}".encode("ascii")
    return hmac.new(cluster_secret, message, hashlib.sha256).digest()


def key_id(cluster_secret: bytes) -> str:
    """The public name of a cluster secret: it reveals nothing of the secret, and two secrets share it
    with probability 2^-72."""
    return b64url(hmac.new(cluster_secret, b"ql3w-key-id", hashlib.sha256).digest()[:9])


class Keyring:
    """The cluster secrets one shell verifies with: the current one (keys every new session) and at most
    one more, still (or already) accepted during a rotation. Mutable in place, so a reload reaches every
    app that holds it."""

    def __init__(self, current: bytes, accepted: bytes | None = None) -> None:
        self.load(current, accepted)

    def load(self, current: bytes, accepted: bytes | None = None) -> None:
        """Replace the secrets (ValueError when both have one key id: they are the same secret)."""
        current_id = key_id(current)
        accepted_id = None if accepted is None else key_id(accepted)
        if accepted_id == current_id:
            raise ValueError("the accepted secret is the current one")
        self.current, self.current_id, self.accepted_id = current, current_id, accepted_id
        self._by_id = {current_id: current} if accepted is None else {current_id: current, accepted_id: accepted}

    def secret(self, kid: str | None) -> bytes | None:
        """The secret a key id names (None: the current one), or None when this keyring has no such key."""
        return self.current if kid is None else self._by_id.get(kid)


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
    key_id: str | None = None,
) -> str:
    """The Authorization header value a Worker sends for one request (`key_id`: the one its session
    was opened under, when the shell named it)."""
    sig = sign(key, method, path, body, now)
    kid = "" if key_id is None else f"kid={key_id}, "
    return f"{SCHEME} worker={worker_id}, session={session_id}, gen={generation}, {kid}ts={now}, sig={sig}"


def parse(header: str) -> Credential:
    """Parse an Authorization header exactly; anything else is `auth.bad_signature`."""
    m = _HEADER.fullmatch(header)
    if m is None or int(m["gen"]) > MAX_SAFE_INTEGER:
        raise WireError(BAD_HEADER, "malformed ql3w authorization")
    return Credential(m["worker"], m["session"], int(m["gen"]), int(m["ts"]), m["sig"], m["kid"])


def verify(keyring: Keyring, credential: Credential, method: str, path: str, body: bytes, now: int) -> bool:
    """Check the timestamp window, then the signature in constant time under the secret the key id names;
    raise WireError otherwise. True when that secret is the current one (else the session should re-key)."""
    if abs(now - credential.timestamp) > SKEW_SECONDS:
        raise WireError(EXPIRED, "ql3w timestamp outside the accepted window")
    secret = keyring.secret(credential.key_id)
    if secret is None:
        raise WireError(BAD_HEADER, "ql3w key id names no secret this shell accepts")
    key = session_key(secret, credential.session_id, credential.worker_id, credential.generation)
    expected = sign(key, method, path, body, credential.timestamp)
    if not hmac.compare_digest(expected, credential.signature):
        raise WireError(BAD_HEADER, "ql3w signature does not verify")
    return secret is keyring.current
