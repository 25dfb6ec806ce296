"""IngressClient: the Worker's one HTTPS authority to the shell (decision 0000 (ADR-0112 §2), docs/architecture.md §7).
Touches the network (one keep-alive socket per origin per credential fingerprint) and reads the
credential files it is given on every call.

- TLS 1.3 only, client certificate, the deployment CA as the only trust anchor.
- Credentials are re-read from the provider for every call; the connection pool is keyed by the
  SHA-256 of certificate + key + trust anchors, so a rotation opens a new socket and closes the old.
- One socket, keep-alive, no redirects, no compression (Accept-Encoding: identity, a Content-Encoding is
  refused), JSON only, exact Content-Length within the response cap (128 KiB, or the answer contract's own cap
  when larger: an activation answer delivering secrets), and only the allow-listed worker-ingress paths. The
  HTTP/1.1 itself is worker/https.py (standard library only: decision 0026).
- Every request is signed with ql3w under the key id the session was opened with; every response is
  parsed by its wire contract, and a lease renewal must answer exactly expectedVersion + 1. An answer
  that says the session was keyed under a secret the shell is retiring sets `rekey_wanted` (the
  lifecycle opens a new session at its next tick; docs/decisions/0012-credential-rotation.md).
- New credential files that cannot be used together (a certificate replaced before its key) keep the
  open connection with the previous ones until they can: a renewal never fails a call.
Offer, activation, lease control, task output and completion share this one client.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar

from qinglong.wire import (
    LEASE_CONTROL_RESPONSES,
    OFFER_RESPONSES,
    ActivationRequest,
    ActivationResponse,
    ActivationStartFailureRequest,
    CompletionRequest,
    CompletionResponse,
    ErrorMessage,
    LeaseControlRequest,
    LeaseControlResponse,
    Message,
    OfferPullRequest,
    OfferResponse,
    OutputAppended,
    OutputAppendRequest,
    OutputLost,
    OutputLostRequest,
    Variants,
    WireError,
    WorkerSessionAlive,
    WorkerSessionHeartbeatRequest,
    WorkerSessionOpened,
    WorkerSessionOpenRequest,
    check_lease_version,
    paths,
    ql3w,
)
from qinglong.wire.activation import PHASES, Phase
from qinglong.wire.bundle_fetch import BundleChunk, BundleChunkRequest
from qinglong.wire.logline import emit, settled
from qinglong.wire.specs import UUID_PATTERN
from qinglong.worker.https import Answer, Connection, MalformedAnswer, TransportFailure

log = logging.getLogger("qinglong.worker")

R = TypeVar("R", bound=Message)


def _pattern(template: str) -> str:
    """The paths of a template of qinglong.wire.paths: each `{…Id}` a canonical UUID, `{phase}` a phase."""
    phase = "(?:" + "|".join(PHASES) + ")"
    return re.sub(r"\\\{(\w+)\\\}", lambda m: phase if m[1] == "phase" else UUID_PATTERN, re.escape(template))


ALLOWED_PATHS: Final = re.compile("|".join(map(_pattern, (
    paths.SESSIONS, paths.HEARTBEAT, paths.OFFERS_PULL, paths.ACTIVATION, paths.LEASE_CONTROL, paths.OUTPUT,
    paths.OUTPUT_LOST, paths.BUNDLE_CHUNKS, paths.COMPLETION,
))))  # fmt: skip
MAX_RESPONSE: Final = 128 * 1024


class ClientError(Exception):
    """Base of everything the client raises."""


class TransportError(ClientError):
    """No decision came back (connection, TLS, timeout, or a 5xx such as storage.unavailable): the
    control plane may or may not have acted, and the same call may be replayed later. `status` is the
    5xx the shell answered, None when no answer came at all."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ProtocolError(ClientError):
    """An answer outside the contract (status, headers, length, shape, version): fail closed."""


class Refused(ClientError):
    """The control plane decided against this call: a 4xx qinglong/error@v1 (e.g. 409 fenced.stale_version)."""

    def __init__(self, status: int, code: str) -> None:
        super().__init__(f"{status} {code}")
        self.status, self.code = status, code


class Unauthenticated(Refused):
    """401, or a fence on the session itself (stale_session, session_expired): reopen the session and
    replay; nothing was decided about the Run."""


@dataclass(frozen=True)
class Credentials:
    """Paths of the Worker's certificate, key and trust anchors, and the SHA-256 of their bytes."""

    certificate: Path
    key: Path
    trust_anchors: Path
    fingerprint: bytes


class CredentialProvider(Protocol):
    def load(self) -> Credentials: ...


@dataclass(frozen=True)
class FileCredentials:
    """Credentials read from three files on every call (rotation = replace the files)."""

    certificate: Path
    key: Path
    trust_anchors: Path

    def load(self) -> Credentials:
        digest = hashlib.sha256()
        for path in (self.certificate, self.key, self.trust_anchors):
            data = path.read_bytes()
            digest.update(len(data).to_bytes(8, "big") + data)
        return Credentials(self.certificate, self.key, self.trust_anchors, digest.digest())


@dataclass(frozen=True)
class Session:
    """An open Worker session: its id, the generation it was opened under, and its signing key."""

    session_id: str
    generation: int
    key: bytes
    expires_at_ms: int
    key_id: str | None = None  # the shell's name for the secret the key was derived from (None: an older shell)


def _client_context(creds: Credentials) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_verify_locations(cafile=creds.trust_anchors)
    ctx.load_cert_chain(creds.certificate, creds.key)
    return ctx


class IngressClient:
    """The one HTTPS client of a Worker. Nothing happens at construction; the first call connects."""

    def __init__(
        self,
        origin: str,
        worker_id: str,
        credentials: CredentialProvider,
        *,
        timeout_s: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not re.fullmatch(r"https://[A-Za-z0-9.\-]+(?::[0-9]{1,5})?", origin):
            raise ValueError("origin must be https://host[:port]")
        self.origin = origin
        self._worker_id = worker_id
        self._credentials = credentials
        self.timeout_s = timeout_s
        self._clock = clock
        host, _, port = origin.removeprefix("https://").partition(":")
        self._host, self._port = host, int(port or 443)
        self._fingerprint: bytes | None = None
        self._http: Connection | None = None
        self.connections_opened = 0  # observable: one per credential fingerprint while the socket lives
        self.rekey_wanted: str | None = None  # the session id an answer told to re-key

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None
            self._fingerprint = None

    async def _session_for(self, creds: Credentials) -> Connection:
        if self._http is not None and creds.fingerprint == self._fingerprint:
            return self._http
        old = self._http
        try:
            context = _client_context(creds)
        except (ssl.SSLError, OSError) as exc:
            if old is None:
                raise
            # Mid-replacement (a new certificate beside the old key): go on with the connection made
            # from the previous files; the next call tries the files again.
            emit(log, logging.WARNING, "credentials.unusable", key="credentials.unusable", error=type(exc).__name__)
            return old
        settled("credentials.unusable")
        self._http = Connection(self._host, self._port, context, opened=self._opened)
        self._fingerprint = creds.fingerprint
        if old is not None:
            await old.close()
        return self._http

    def _opened(self) -> None:
        self.connections_opened += 1

    async def _call(
        self,
        path: str,
        body: Message,
        contract: Variants[R] | type[R],
        session: Session | None,
        timeout_s: float | None = None,
        headers_seen: Callable[[Any], None] | None = None,
    ) -> R:
        """One signed call; `timeout_s` shortens this call's budget (never beyond the client's);
        `headers_seen` gets the headers of a 200 answer."""
        if not ALLOWED_PATHS.fullmatch(path):
            raise ValueError(f"not a worker-ingress path: {path}")
        raw = body.to_json()  # refuses a body over its contract's cap
        route = "open" if path.endswith("/sessions") else path.rsplit("/", 1)[-1].replace("offers:", "")
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "Accept-Encoding": "identity",
        }
        if session is not None:
            headers["Authorization"] = ql3w.authorization(
                session.key, worker_id=self._worker_id, session_id=session.session_id,
                generation=session.generation, method="POST", path=path, body=raw, now=int(self._clock()),
                key_id=session.key_id,
            )  # fmt: skip
        try:
            http = await self._session_for(self._credentials.load())
            budget = self.timeout_s if timeout_s is None else min(timeout_s, self.timeout_s)
            resp = await http.post(path, raw, headers, timeout_s=budget, cap=max(MAX_RESPONSE, _cap(contract)))
            data = _checked(resp)
            answered = resp.headers
        except (TransportFailure, TimeoutError, OSError, ssl.SSLError) as exc:
            emit(log, logging.WARNING, "call.transport_failed", key=f"transport:{route}", route=route,
                 error=type(exc).__name__)  # fmt: skip
            raise TransportError(type(exc).__name__) from None
        except (MalformedAnswer, ProtocolError) as exc:
            emit(log, logging.ERROR, "call.protocol_error", key=f"protocol:{route}", route=route, detail=str(exc))
            raise ProtocolError(str(exc)) from None
        settled(f"transport:{route}")
        if resp.status != 200:
            error = _refusal(resp.status, data)
            code = error.code if isinstance(error, Refused) else str(error)
            emit(log, logging.WARNING, "call.refused", key=f"refused:{route}:{code}", route=route, status=resp.status,
                 code=code)  # fmt: skip
            raise error
        try:
            result: R = contract.parse(data)
        except WireError as exc:
            emit(log, logging.ERROR, "call.protocol_error", key=f"protocol:{route}", route=route, detail=exc.code)
            raise ProtocolError(f"response outside its contract: {exc.code}") from None
        if session is not None and answered.get(ql3w.REKEY_HEADER) == "1":
            self.rekey_wanted = session.session_id
        if headers_seen is not None:
            headers_seen(answered)
        return result

    async def open_session(self, *, capacity: int, generation: int) -> Session:
        body = WorkerSessionOpenRequest(capacity=capacity, worker_generation=generation)
        key_ids: list[str | None] = []
        path = paths.SESSIONS.format(workerId=self._worker_id)
        opened = await self._call(
            path, body, WorkerSessionOpened, None, None, lambda h: key_ids.append(h.get(ql3w.KEY_ID_HEADER))
        )
        key_id = key_ids[0]
        if key_id is not None and not ql3w.KEY_ID.fullmatch(key_id):
            emit(log, logging.ERROR, "call.protocol_error", key="protocol:open", route="open", detail="key_id")
            raise ProtocolError(f"a malformed {ql3w.KEY_ID_HEADER} header")
        key = base64.urlsafe_b64decode(opened.session_key + "=")
        return Session(opened.session_id, opened.worker_generation, key, opened.expires_at_ms, key_id)

    def _path(self, template: str, session: Session, offer_id: str = "", phase: str = "") -> str:
        """A path of qinglong.wire.paths for this Worker and `session` (and the Offer and phase it names)."""
        return template.format(workerId=self._worker_id, sessionId=session.session_id, offerId=offer_id, phase=phase)

    async def heartbeat(self, session: Session) -> WorkerSessionAlive:
        body = WorkerSessionHeartbeatRequest(worker_generation=session.generation)
        return await self._call(self._path(paths.HEARTBEAT, session), body, WorkerSessionAlive, session)

    async def pull(self, session: Session, pull_id: str) -> OfferResponse:
        body = OfferPullRequest(pull_id=pull_id)
        return await self._call(self._path(paths.OFFERS_PULL, session), body, OFFER_RESPONSES, session)

    async def activate(
        self,
        session: Session,
        offer_id: str,
        phase: Phase,
        body: ActivationRequest | ActivationStartFailureRequest,
    ) -> ActivationResponse:
        path = self._path(paths.ACTIVATION, session, offer_id, phase)
        return await self._call(path, body, ActivationResponse, session)

    async def lease_control(
        self, session: Session, body: LeaseControlRequest, *, timeout_s: float | None = None
    ) -> LeaseControlResponse:
        path = self._path(paths.LEASE_CONTROL, session)
        response = await self._call(path, body, LEASE_CONTROL_RESPONSES, session, timeout_s)
        try:
            return check_lease_version(response, expected_version=body.expected_version)
        except WireError as exc:
            raise ProtocolError(exc.code) from None

    async def append_output(
        self, session: Session, offer_id: str, body: OutputAppendRequest, *, timeout_s: float | None = None
    ) -> OutputAppended:
        return await self._call(self._path(paths.OUTPUT, session, offer_id), body, OutputAppended, session, timeout_s)

    async def output_lost(self, session: Session, offer_id: str, body: OutputLostRequest) -> OutputLost:
        return await self._call(self._path(paths.OUTPUT_LOST, session, offer_id), body, OutputLost, session)

    async def bundle_chunk(self, session: Session, offer_id: str, body: BundleChunkRequest) -> BundleChunk:
        return await self._call(self._path(paths.BUNDLE_CHUNKS, session, offer_id), body, BundleChunk, session)

    async def complete(self, session: Session, offer_id: str, body: CompletionRequest) -> CompletionResponse:
        return await self._call(self._path(paths.COMPLETION, session, offer_id), body, CompletionResponse, session)


def _cap(contract: Variants[Any] | type[Message]) -> int:
    """The answer cap of a contract (an activation answer that delivers secrets is the largest)."""
    return contract.cap if isinstance(contract, Variants) else contract.CAP


def _checked(resp: Answer) -> bytes:
    """The body, only if it is JSON (the transport already held it to identity encoding, an exact
    Content-Length and the cap)."""
    if resp.content_type != "application/json":
        raise ProtocolError("the response is not application/json")
    return resp.body


def _refusal(status: int, data: bytes) -> ClientError:
    """5xx: no decision (replayable); 401 or a session fence: reopen the session; other 4xx: a decision."""
    try:
        code = ErrorMessage.parse(data).code
    except WireError:
        if status >= 500:
            return TransportError(f"HTTP {status}", status)
        return ProtocolError(f"HTTP {status} without a qinglong/error@v1 body")
    if status >= 500:
        return TransportError(f"HTTP {status} {code}", status)
    if status == 401 or code in ("fenced.stale_session", "fenced.session_expired"):
        return Unauthenticated(status, code)
    return Refused(status, code)
