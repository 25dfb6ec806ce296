"""The shell's aiohttp applications: the one pipeline every route of routes.ROUTES runs through, the
loopback admin app (/metrics, /healthz), and the status mapping. Touches the database only through
shell.db, and writes structured JSON logs that never hold a token, key, digest or signature.

Worker routes: mTLS identity (verified at the handshake; SAN worker id = path) → ql3w header (worker
and session = path) → body ≤ cap → signature → media type → exact parse → bind → one SQL call →
response contract → 200. Session open is authenticated by the certificate alone.
User routes: bearer → admission + committed audit row (one SQL call) → only then the body ≤ cap →
media type → exact parse → bind → one SQL call (SERIALIZABLE where the route says) → contract.
A refusal names only its stable code; its HTTP status is the code's in qinglong.wire.errors.ERRORS.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from qinglong.shell.db import BadProjection, Database, StorageUnavailable
from qinglong.shell.metrics import REFUSALS, REGISTRY, REQUESTS
from qinglong.shell.routes import ROUTES, Admission, Call, Route, mint_token
from qinglong.shell.tls import worker_identity
from qinglong.wire import ErrorMessage, Message, WireError, decode, outcome_code, ql3w
from qinglong.wire.errors import ERRORS
from qinglong.wire.logline import emit

log = logging.getLogger("qinglong.shell")

DB: Final = web.AppKey("db", Database)
SECRET: Final = web.AppKey("cluster_secret", bytes)
OUTCOMES: Final = frozenset({"invalid", "not_found", "fenced"})  # the database statuses outcome_code maps
ADMISSION_CODES: Final = {
    "auth.unknown_token": "auth.unauthenticated",
    "auth.subject_disabled": "auth.unauthenticated",
    "project.not_found": "not_found",
}  # any other deny reason is `denied`
_UUID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_BEARER: Final = re.compile(r"Bearer ([A-Za-z0-9._~+/-]{16,512}=*)")


class Refusal(Exception):
    """A request the pipeline answers with qinglong/error@v1, with the status of its code in the error table
    (a code outside the table is a KeyError here: a bug, answered 500 internal.error)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.error, self.message = ERRORS[code], message

    def response(self, request_id: str) -> web.Response:
        REFUSALS.labels(self.error.code).inc()
        body = ErrorMessage(code=self.error.code, message=self.message[:200] or self.error.code, request_id=request_id)
        return web.Response(status=self.error.status, body=body.to_json(), content_type="application/json")


def _log(event: str, **fields: Any) -> None:
    emit(log, logging.INFO, event, **fields)


async def _read_capped(request: web.Request, cap: int) -> bytes:
    """The body, refused (request.too_large) before anything past `cap` is buffered."""
    if request.content_length is not None and request.content_length > cap:
        raise Refusal("request.too_large", f"body over {cap} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_chunked(16384):
        size += len(chunk)
        if size > cap:
            raise Refusal("request.too_large", f"body over {cap} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _require_json(request: web.Request) -> None:
    if request.content_type != "application/json":
        raise Refusal("request.unsupported_media_type", "the body must be application/json")


def _check_path_ids(request: web.Request) -> None:
    for name, value in request.match_info.items():
        if name.endswith("Id") and not _UUID.fullmatch(value):
            raise Refusal("wire.bad_uuid", f"path {name} is not a canonical uuid")


def _parse(route: Route, call: Call, raw: bytes) -> Message:
    assert route.request is not None
    contract = route.request(call.match)
    try:
        decode(raw, cap=contract.CAP)  # cheap structural checks before the contract's own
        return contract.parse(raw)
    except WireError as exc:
        raise Refusal(exc.code, exc.message) from None


async def _worker_identity(request: web.Request, route: Route, call: Call) -> bytes:
    """Authenticate a worker request; return its body (read, capped and, but for session open, signed)."""
    identity = worker_identity(request.transport.get_extra_info("ssl_object") if request.transport else None)
    if identity is None or identity[0] != call.match["workerId"]:
        raise Refusal("auth.certificate_mismatch", "the client certificate does not name this worker")
    call.worker_id, call.cert_fingerprint = identity
    assert route.request is not None
    cap = route.request(call.match).CAP
    if route.audience == "worker-open":
        _require_json(request)
        return await _read_capped(request, cap)
    try:
        cred = ql3w.parse(request.headers.get("Authorization", ""))
    except WireError as exc:
        raise Refusal(exc.code, exc.message) from None
    if cred.worker_id != call.worker_id or cred.session_id != call.match["sessionId"]:
        raise Refusal("auth.bad_signature", "the credential names another worker or session")
    _require_json(request)
    raw = await _read_capped(request, cap)
    try:
        ql3w.verify(request.app[SECRET], cred, request.method, request.path, raw, int(time.time()))
    except WireError as exc:
        raise Refusal(exc.code, exc.message) from None
    call.session_id, call.generation = cred.session_id, cred.generation
    return raw


async def _admit(request: web.Request, route: Route, call: Call, request_id: str) -> None:
    """Bearer → admission decision + committed audit row, before any byte of the body is read."""
    m = _BEARER.fullmatch(request.headers.get("Authorization", ""))
    digest = hashlib.sha256(m[1].encode("ascii") if m else b"").digest()
    decision = await request.app[DB].call(
        Admission.FUNCTION, Admission.args(digest, call.match["projectId"], route.permission, route.name, request_id)
    )
    try:
        admission = Admission.from_obj(decision)
    except WireError:
        raise Refusal("internal.bad_projection", "admission answered outside its contract") from None
    if admission.decision == "allow":
        if admission.subject_id is None or admission.project_version is None or admission.binding_version is None:
            raise Refusal("internal.bad_projection", "an allow without its subject and versions")
        call.subject_id = admission.subject_id
        call.project_version, call.binding_version = admission.project_version, admission.binding_version
        return
    if admission.decision == "require_approval":
        raise Refusal("approval_required", "an agent needs a human's approval for this")
    raise Refusal(ADMISSION_CODES.get(admission.reason, "denied"), admission.reason)


def _respond(route: Route, call: Call, result: dict[str, Any]) -> web.Response:
    status = result.get("status")
    if status in OUTCOMES:
        try:
            code = outcome_code(result)
        except WireError:
            raise Refusal("internal.bad_projection", "database outcome outside the contract") from None
        raise Refusal(code, str(result.get("reason") or status))
    try:
        message = route.response.from_result(result, **route.shell_fields(call, result))
    except WireError:
        raise Refusal("internal.bad_projection", "database projection outside the response contract") from None
    http = 202 if status in route.accepted else 200
    return web.Response(status=http, body=message.to_json(), content_type="application/json")


def _handler(route: Route) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        request_id = uuid.uuid4().hex
        started = time.perf_counter()
        call = Call(match=dict(request.match_info), body=None, cluster_secret=request.app[SECRET])
        try:
            _check_path_ids(request)
            if route.audience == "user":
                await _admit(request, route, call, request_id)
                if route.request is not None:
                    _require_json(request)
                    call.body = _parse(route, call, await _read_capped(request, route.request(call.match).CAP))
            else:
                call.body = _parse(route, call, await _worker_identity(request, route, call))
                generation = getattr(call.body, "worker_generation", call.generation)
                if call.generation is not None and generation != call.generation:
                    raise Refusal("fenced.stale_generation", "the body names another worker generation")
            if route.mints_token:
                call.minted_token = mint_token()
            result = await request.app[DB].call(route.function, route.bind(call), serializable=route.serializable)
            response = _respond(route, call, result)
        except Refusal as refusal:
            response = refusal.response(request_id)
        except StorageUnavailable:
            response = Refusal("storage.unavailable", "the database is unavailable").response(request_id)
        except BadProjection:
            response = Refusal("internal.bad_projection", "the database answered outside the contract").response(
                request_id
            )
        except Exception as exc:  # a bug: answer in the error contract, log the type only (no values, no secrets)
            _log("internal_error", route=route.name, request_id=request_id, error=type(exc).__name__)
            response = Refusal("internal.error", "internal error").response(request_id)
        REQUESTS.labels(route.name, str(response.status)).inc()
        _log(
            "request",
            route=route.name,
            status=response.status,
            request_id=request_id,
            ms=round((time.perf_counter() - started) * 1000, 2),
        )
        return response

    return handle


def _database_cleanup(db: Database) -> Callable[[web.Application], AsyncIterator[None]]:
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        await db.open()
        yield
        await db.close()

    return ctx


def make_app(audience: str, db: Database, cluster_secret: bytes, *, own_db: bool = False) -> web.Application:
    """The worker-ingress ("worker") or user-API ("user") application over one Database."""
    app = web.Application(client_max_size=2 * 1024 * 1024)
    app[DB] = db
    app[SECRET] = cluster_secret
    for route in ROUTES:
        if route.audience.startswith(audience):
            app.router.add_route(route.method, route.path, _handler(route))
    if audience == "user":
        from qinglong.shell.openapi import openapi_document

        document = json.dumps(openapi_document(), sort_keys=True).encode()

        async def openapi(request: web.Request) -> web.Response:
            return web.Response(body=document, content_type="application/json")

        app.router.add_get("/openapi.json", openapi)
    if own_db:
        app.cleanup_ctx.append(_database_cleanup(db))
    return app


def make_admin_app(db: Database) -> web.Application:
    """Loopback-only plain HTTP: Prometheus /metrics and /healthz (200 when the database answers)."""

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(request: web.Request) -> web.Response:
        ok = await db.healthy()
        return web.json_response(
            {"status": "ok" if ok else "storage_unavailable"},
            status=200 if ok else ERRORS["storage.unavailable"].status,
        )

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    return app
