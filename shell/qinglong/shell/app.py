"""The shell's aiohttp applications: the one pipeline every route of routes.ROUTES runs through, the
loopback admin app (/metrics, /healthz), and the status mapping. Touches the database only through
shell.db, and writes structured JSON logs that never hold a token, key, digest or signature.

Worker routes: mTLS identity (verified at the handshake; SAN worker id = path) → ql3w header (worker
and session = path) → body ≤ cap → signature → media type → exact parse → bind → one SQL call →
response contract → 200. Session open is authenticated by the certificate alone.
User routes: bearer (none well-formed: 401 with no SQL call) → admission (of the subject alone where the route
names no Project: subject_admission_v1) + committed audit row (one SQL
call) → only then the body ≤ cap → media type → exact parse → bind → one SQL call (SERIALIZABLE where
the route says) → contract.
Project secrets (routes.Route.sealing): a set is refused secrets.unconfigured before its body is read when this
shell holds no key-encryption key, and its binder seals the value; the sealed values a starting ACK's answer
carries are opened before the contract check (routes.open_delivery). A value that cannot be opened, or no key
to open it with, is a typed 5xx (secrets.*), logged with the code and the version id only.
A refusal names only its stable code; its HTTP status is the code's in qinglong.wire.errors.ERRORS.
Bodies are exact: `application/json` (at most `charset=utf-8`), never content-encoded, and read as
received (aiohttp's request decompression is off: HANDLER_ARGS), so the caps and the ql3w body hash
count the bytes on the wire. What no route answers (an unknown path, another method; and, from
qinglong.shell.listener, a head aiohttp could not parse) is qinglong/error@v1 too (`unrouted`).
The query parameters a user route declares (routes.Route.query) are parsed right after admission, by the
field engine like a body (qinglong.wire.query); a route that declares none ignores its query string.
"""

from __future__ import annotations

import json
import logging
import re
import ssl
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from http import HTTPStatus
from typing import Any, Final

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from qinglong.shell.console import add_console
from qinglong.shell.db import (
    BadProjection,
    Database,
    DatabaseFault,
    StorageConflict,
    StorageError,
    StoragePartitionMissing,
    StorageUnavailable,
)
from qinglong.shell.metrics import REFUSALS, REGISTRY, REQUESTS, UNAUTHENTICATED, VERIFIED, child
from qinglong.shell.routes import ROUTES, Admission, Call, Route, SecretRefused, mint_token, open_delivery
from qinglong.shell.sealing import Sealer
from qinglong.shell.tls import worker_identity
from qinglong.wire import ErrorMessage, Message, WireError, decode, outcome_code, ql3w
from qinglong.wire.activation import PHASES
from qinglong.wire.common import NAME_PATTERN, SECRET_NAME_PATTERN, token_digest
from qinglong.wire.errors import ERRORS, OUTCOME_STATUSES
from qinglong.wire.logline import emit
from qinglong.wire.notify import RULE_NAME_PATTERN
from qinglong.wire.query import Query
from qinglong.wire.specs import BEARER_TOKEN_PATTERN, UUID_TEXT

log = logging.getLogger("qinglong.shell")

HANDLER_ARGS: Final = {"auto_decompress": False}  # aiohttp's per-connection options of every listener
UNROUTED: Final = "unrouted"  # the route name (metric label, log field) of an answer no route gave
CLOSING: Final = frozenset({"request.malformed", "request.header_too_large"})  # answered, then the connection closes
DB: Final = web.AppKey("db", Database)
SECRET: Final = web.AppKey("keyring", ql3w.Keyring)
SEALER: Final = web.AppKey("sealer", Sealer)  # absent when shell.toml has no [secrets]
ADMISSION_CODES: Final = {"project.not_found": "not_found"}  # any other deny reason is `denied`
UNAUTHENTICATED_REASONS: Final = {"auth.unknown_token": "unknown_token", "auth.subject_disabled": "subject_disabled"}
_NAME: Final = re.compile(NAME_PATTERN)
_SECRET_NAME: Final = re.compile(SECRET_NAME_PATTERN)
_RULE_NAME: Final = re.compile(RULE_NAME_PATTERN)
_PHASE: Final = "{phase:" + "|".join(PHASES) + "}"  # the router's {phase}: another phase is request.unknown_path
_BEARER: Final = re.compile(f"Bearer ({BEARER_TOKEN_PATTERN})")
# RFC 9110 §8.3.1: type, subtype, parameter name and (for charset) value are case-insensitive; a value may be quoted.
_JSON_MEDIA_TYPE: Final = re.compile(r'application/json(?:[ \t]*;[ \t]*charset=(?:utf-8|"utf-8"))?', re.IGNORECASE)


class Refusal(Exception):
    """A request the pipeline answers with qinglong/error@v1, with the status of its code in the error table
    (a code outside the table is a KeyError here: a bug, answered 500 internal.error)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.error, self.message = ERRORS[code], message

    def response(self, request_id: str) -> web.Response:
        child(REFUSALS, self.error.code).inc()
        body = ErrorMessage(code=self.error.code, message=self.message[:200] or self.error.code, request_id=request_id)
        response = web.Response(status=self.error.status, body=body.to_json(), content_type="application/json")
        if self.error.code in CLOSING:  # the request's framing cannot be trusted: nothing after it is read
            response.force_close()
        return response


class ClientGone(Exception):
    """The connection went away while the body was read (the client closed it, or a budget such as
    body_timeout did): there is nobody to answer."""


def _log(event: str, **fields: Any) -> None:
    emit(log, logging.INFO, event, **fields)


def _log_request(route: str, status: int, **fields: Any) -> None:
    """The access line of one request. A refusal (4xx) costs an attacker nothing, so its lines are at most one
    a minute per route and status (`repeated` counts the rest; the metrics count every one)."""
    key = f"request:{route}:{status}" if 400 <= status < 500 else None
    emit(log, logging.INFO, "request", key=key, route=route, status=status, **fields)


def unrouted(code: str, message: str) -> web.Response:
    """qinglong/error@v1 for a request no route answered: the router has no route for its path or method,
    or (qinglong.shell.listener) aiohttp could not parse its head. Counted and logged as route UNROUTED."""
    request_id = uuid.uuid4().hex
    response = Refusal(code, message).response(request_id)
    child(REQUESTS, UNROUTED, str(response.status)).inc()
    _log_request(UNROUTED, response.status, code=code, request_id=request_id)
    return response


@web.middleware
async def _unrouted_answers(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The router's own refusals (no route has this path; the path's routes take other methods) as qinglong/error@v1."""
    try:
        return await handler(request)
    except web.HTTPMethodNotAllowed as exc:
        response = unrouted("request.method_not_allowed", "this path takes other methods (see Allow)")
        response.headers[hdrs.ALLOW] = exc.headers[hdrs.ALLOW]
        return response
    except web.HTTPNotFound:
        return unrouted("request.unknown_path", "no route has this path")


async def _read_capped(request: web.Request, cap: int) -> bytes:
    """The body as received (never decoded), refused (request.too_large) before anything past `cap` is
    buffered; a body whose framing breaks is request.malformed, and a connection that goes away while the
    body is read is ClientGone."""
    if request.content_length is not None and request.content_length > cap:
        raise Refusal("request.too_large", f"body over {cap} bytes")
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.content.iter_chunked(16384):
            size += len(chunk)
            if size > cap:
                raise Refusal("request.too_large", f"body over {cap} bytes")
            chunks.append(chunk)
    except web.RequestPayloadError:  # aiohttp's parser refused the body's framing (a bad chunk, say)
        raise Refusal("request.malformed", "the body's framing does not parse") from None
    except OSError:  # connection_lost: ConnectionResetError, or the TLS error that ended the connection
        raise ClientGone from None
    return b"".join(chunks)


def _require_json(request: web.Request) -> None:
    """Exactly one Content-Type, `application/json` with no parameter but `charset=utf-8`, and no
    Content-Encoding but `identity`: refused before a byte of the body is read (or could be decoded)."""
    types = request.headers.getall(hdrs.CONTENT_TYPE, [])
    if len(types) != 1 or not _JSON_MEDIA_TYPE.fullmatch(types[0]):
        raise Refusal("request.unsupported_media_type", "the body must be application/json (at most charset=utf-8)")
    if any(value.lower() != "identity" for value in request.headers.getall(hdrs.CONTENT_ENCODING, [])):
        raise Refusal("request.unsupported_media_type", "the body must not be content-encoded")


def _parse_query(route: Route, request: web.Request) -> Query | None:
    """The query parameters the route declares, parsed from the raw query string like a body's fields."""
    if route.query is None:
        return None
    try:
        return route.query.parse(request.rel_url.raw_query_string)
    except WireError as exc:
        raise Refusal(exc.code, exc.message) from None


def _check_path_ids(request: web.Request) -> None:
    for name, value in request.match_info.items():
        if name.endswith("Id") and not UUID_TEXT.fullmatch(value):
            raise Refusal("wire.bad_uuid", f"path {name} is not a canonical uuid")
        if name == "project" and not _NAME.fullmatch(value):
            raise Refusal("wire.bad_pattern", "path project is not a project id or name")
        if name == "task" and not _NAME.fullmatch(value):
            raise Refusal("wire.bad_pattern", "path task is not a task name")
        if name == "name" and not _SECRET_NAME.fullmatch(value):
            raise Refusal("wire.bad_pattern", "path secret name is not [A-Z_][A-Z0-9_]{0,63}")
        if name == "rule" and not _RULE_NAME.fullmatch(value):
            raise Refusal("wire.bad_pattern", "path rule name is not [a-z0-9][a-z0-9._-]{0,63}")


def _parse(route: Route, call: Call, raw: bytes) -> Message:
    """The body, decoded once (UTF-8, one JSON object, the codec's structural limits), then checked by the
    route's contract."""
    assert route.request is not None
    contract = route.request(call.match)
    try:
        return contract.from_obj(decode(raw, cap=contract.CAP))
    except WireError as exc:
        raise Refusal(exc.code, exc.message) from None


_PEERS: Final[weakref.WeakKeyDictionary[ssl.SSLObject, tuple[str, bytes] | None]] = weakref.WeakKeyDictionary()


def _peer(request: web.Request) -> tuple[str, bytes] | None:
    """The worker identity of the request's connection (tls.worker_identity), read from its certificate once
    per connection: kept while the connection's TLS object lives. TLS 1.3 has no renegotiation and the
    listener asks for no post-handshake authentication, so a connection's peer certificate never changes."""
    ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
    if not isinstance(ssl_object, ssl.SSLObject):
        return worker_identity(ssl_object)
    try:
        return _PEERS[ssl_object]
    except KeyError:
        identity = _PEERS[ssl_object] = worker_identity(ssl_object)
        return identity


async def _worker_identity(request: web.Request, route: Route, call: Call) -> bytes:
    """Authenticate a worker request; return its body (read, capped and, but for session open, signed)."""
    identity = _peer(request)
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
        current = ql3w.verify(request.app[SECRET], cred, request.method, request.path, raw, int(time.time()))
    except WireError as exc:
        raise Refusal(exc.code, exc.message) from None
    child(VERIFIED, "current" if current else "accepted").inc()
    call.session_id, call.generation, call.rekey = cred.session_id, cred.generation, not current
    return raw


def _unauthenticated(request: web.Request, route: Route, reason: str, message: str, **ids: Any) -> Refusal:
    """A request refused auth.unauthenticated: counted by reason, and logged with its reason and peer address
    (at most once a minute per reason, with how many were held back), never with its Authorization header."""
    UNAUTHENTICATED.labels(reason).inc()
    emit(log, logging.WARNING, "auth.unauthenticated", key=f"unauthenticated:{reason}", reason=reason,
         peer=request.remote, route=route.name, **ids)  # fmt: skip
    return Refusal("auth.unauthenticated", message)


async def _admit(request: web.Request, route: Route, call: Call, request_id: str) -> None:
    """Bearer → admission decision (+ the committed audit row of an active subject), before any byte of the
    body is read. Without exactly one well-formed `Authorization: Bearer <token>` the request is refused here,
    with no database call; an unknown token or a disabled subject is refused by admission, which writes nothing
    for them (decision 0006)."""
    headers = request.headers.getall("Authorization", [])
    m = _BEARER.fullmatch(headers[0]) if len(headers) == 1 else None
    if m is None:
        reason = "malformed" if headers else "missing"
        message = "no well-formed bearer token (Authorization: Bearer <token>)"
        raise _unauthenticated(request, route, reason, message, request_id=request_id)
    digest, project = token_digest(m[1]), call.match.get("project")  # None: the route names no Project
    decision = await request.app[DB].call(*Admission.call(digest, project, route.permission, route.name, request_id))
    try:
        admission = Admission.from_obj(decision)
    except WireError:
        raise Refusal("internal.bad_projection", "admission answered outside its contract") from None
    if admission.decision == "allow" and project is None:
        if admission.subject_id is None:
            raise Refusal("internal.bad_projection", "an allow without its subject")
        call.subject_id = admission.subject_id
        return
    if admission.decision == "allow" and project is not None:
        project_id = admission.project_id or (project if UUID_TEXT.fullmatch(project) else None)  # v1 was given it
        if None in (admission.subject_id, project_id, admission.project_version, admission.binding_version):
            raise Refusal("internal.bad_projection", "an allow without its subject, project and versions")
        call.subject_id, call.project_id = admission.subject_id, project_id
        call.project_version, call.binding_version = admission.project_version, admission.binding_version
        return
    if admission.decision == "require_approval":
        raise Refusal("approval_required", "an agent needs a human's approval for this")
    if admission.reason in UNAUTHENTICATED_REASONS:
        subject = {"subject_id": admission.subject_id} if admission.subject_id else {}
        reason = UNAUTHENTICATED_REASONS[admission.reason]
        raise _unauthenticated(request, route, reason, admission.reason, request_id=request_id, **subject)
    raise Refusal(ADMISSION_CODES.get(admission.reason, "denied"), admission.reason)


def _respond(route: Route, call: Call, result: dict[str, Any]) -> web.Response:
    status = result.get("status")
    if status in OUTCOME_STATUSES:
        try:
            code = outcome_code(result)
        except WireError:
            raise Refusal("internal.bad_projection", "database outcome outside the contract") from None
        raise Refusal(code, str(result.get("reason") or status))
    if route.sealing == "open":
        try:
            result = open_delivery(call, result)
        except WireError:
            raise Refusal("internal.bad_projection", "sealed secrets outside their contract") from None
    try:
        body = route.response.result_json(result, **route.shell_fields(call, result))
    except WireError:
        raise Refusal("internal.bad_projection", "database projection outside the response contract") from None
    http = 202 if status in route.accepted else 200
    return web.Response(status=http, body=body, content_type="application/json")


def _secret_refused(route: Route, request_id: str, refused: SecretRefused) -> Refusal:
    """A secret value this shell cannot seal or open: logged with its code and version id, never a value or key
    byte (a tampered value every time; the others, which a reload or another shell may cure, once a minute per
    code and version, with how many were held back)."""
    tampered = refused.code == "secrets.tampered"
    emit(log, logging.ERROR if tampered else logging.WARNING, "secret_refused",
         key=None if tampered else f"secret_refused:{refused.code}:{refused.version_id or route.name}",
         route=route.name, request_id=request_id, code=refused.code, version_id=refused.version_id)  # fmt: skip
    messages = {
        "secrets.unconfigured": "this shell holds no key-encryption key ([secrets] in shell.toml)",
        "secrets.unknown_kek": "the secret is sealed under a key-encryption key this shell does not hold",
        "secrets.tampered": "a stored secret value does not authenticate",
    }
    return Refusal(refused.code, messages.get(refused.code, refused.code))


def _database_error(level: int, route: Route, request_id: str, exc: StorageError) -> None:
    """A failed database call: its SQLSTATE and error class, never its message or parameters."""
    key = f"database_error:{exc.sqlstate}" if level < logging.ERROR else None
    emit(log, level, "database_error", key=key, route=route.name, request_id=request_id, sqlstate=exc.sqlstate,
         error=exc.error)  # fmt: skip


def _handler(route: Route) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        request_id = uuid.uuid4().hex
        started = time.perf_counter()
        call = Call(
            match=dict(request.match_info), body=None, keyring=request.app.get(SECRET), sealer=request.app.get(SEALER)
        )
        try:
            _check_path_ids(request)
            if route.audience == "user":
                await _admit(request, route, call, request_id)
                call.query = _parse_query(route, request)
                if route.sealing == "seal" and call.sealer is None:  # the value is not even read
                    raise SecretRefused("secrets.unconfigured")
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
            result = await request.app[DB].call(
                route.function, route.bind(call), serializable=route.serializable, grouped=route.grouped
            )
            response = _respond(route, call, result)
            if call.keyring is not None and route.audience == "worker-open":  # no await since the key was derived
                response.headers[ql3w.KEY_ID_HEADER] = call.keyring.current_id
            elif call.rekey:
                response.headers[ql3w.REKEY_HEADER] = "1"
        except Refusal as refusal:
            response = refusal.response(request_id)
        except SecretRefused as refused:
            response = _secret_refused(route, request_id, refused).response(request_id)
        except ClientGone:  # nobody to answer: no status is counted, and it is no internal error
            _log("client_gone", route=route.name, request_id=request_id, ms=_ms(started))
            return web.Response(status=400)  # aiohttp finds the connection closed and sends nothing
        except StorageUnavailable as exc:  # retryable, as storage.conflict: logged at most once a minute per SQLSTATE
            _database_error(logging.WARNING, route, request_id, exc)
            response = Refusal("storage.unavailable", "the database is unavailable").response(request_id)
        except StorageConflict as exc:
            _database_error(logging.WARNING, route, request_id, exc)
            response = Refusal("storage.conflict", "concurrent transactions conflicted; retry").response(request_id)
        except StoragePartitionMissing as exc:  # maintenance stopped for over a year: logged every time
            _database_error(logging.ERROR, route, request_id, exc)
            response = Refusal("storage.partition_missing", "no partition holds rows of this time").response(request_id)
        except DatabaseFault as exc:  # a bug in the deployed SQL or in how it is called: logged every time
            _database_error(logging.ERROR, route, request_id, exc)
            response = Refusal("internal.error", "internal error").response(request_id)
        except BadProjection:
            response = Refusal("internal.bad_projection", "the database answered outside the contract").response(
                request_id
            )
        except Exception as exc:  # a bug: answer in the error contract, log the type only (no values, no secrets)
            _log("internal_error", route=route.name, request_id=request_id, error=type(exc).__name__)
            response = Refusal("internal.error", "internal error").response(request_id)
        child(REQUESTS, route.name, str(response.status)).inc()
        _log_request(route.name, response.status, request_id=request_id, ms=_ms(started))
        return response

    return handle


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)


def _database_cleanup(db: Database) -> Callable[[web.Application], AsyncIterator[None]]:
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        await db.open()
        yield
        await db.close()

    return ctx


def make_app(
    audience: str,
    db: Database,
    keyring: ql3w.Keyring | None = None,
    *,
    sealer: Sealer | None = None,
    own_db: bool = False,
) -> web.Application:
    """The worker-ingress ("worker", which verifies with `keyring`) or user-API ("user") application over one
    Database (the user API's also serves /openapi.json and the web console's static files, qinglong.shell.console).
    `sealer`: the key-encryption keys Project secret values are sealed and opened with (None: the routes that need
    them answer secrets.unconfigured)."""
    app = web.Application(client_max_size=2 * 1024 * 1024, middlewares=[_unrouted_answers], handler_args=HANDLER_ARGS)
    app[DB] = db
    if sealer is not None:
        app[SEALER] = sealer
    if audience == "worker":
        if keyring is None:
            raise ValueError("the worker-ingress app verifies with a keyring")
        app[SECRET] = keyring
    for route in ROUTES:
        if route.audience.startswith(audience):
            app.router.add_route(route.method, route.path.replace("{phase}", _PHASE), _handler(route))
    if audience == "user":
        from qinglong.shell.openapi import openapi_document

        document = json.dumps(openapi_document(), sort_keys=True).encode()

        async def openapi(request: web.Request) -> web.Response:
            return web.Response(body=document, content_type="application/json")

        app.router.add_get("/openapi.json", openapi)
        add_console(app)
    if own_db:
        app.cleanup_ctx.append(_database_cleanup(db))
    return app


async def _database_families(db: Database) -> bytes:
    """What the database says at each scrape (nothing when it does not answer: /healthz says so): the Workers'
    certificate expiry (one series for all Workers: `qinglong worker list` names them), and the storage health
    (ql_api.storage_health_v1: how long the partitions last, the retention backlog). Metric families, not Gauges:
    in a shell of several processes a Gauge would write its value to the shared folder of files."""
    try:
        found = await db.call("worker_certificate_expiry_v1", {})
        health = await db.call("storage_health_v1", {})
    except (StorageError, BadProjection):
        return b""
    families = []
    if isinstance(horizon := health.get("partitionHorizonMs"), int):
        families.append(GaugeMetricFamily(
            "qinglong_partitions_horizon_timestamp_seconds",
            "When the partitions of run_events or security_audit run out (kept 13 months ahead; a later write fails)",
            value=horizon / 1000,
        ))  # fmt: skip
    for key, name, text in (
        ("retentionBacklogRuns", "qinglong_retention_backlog_runs",
         "Terminal Runs past run_retention_days that the last retention cycle left"),
        ("retentionBehindMs", "qinglong_retention_behind_seconds",
         "How long the oldest terminal Run past run_retention_days has waited to be pruned (alert above a day)"),
    ):  # fmt: skip
        if isinstance(value := health.get(key), int):
            families.append(GaugeMetricFamily(name, text, value=value / 1000 if key.endswith("Ms") else value))
    if isinstance(earliest := found.get("earliestNotAfterMs"), int):
        families.append(GaugeMetricFamily(
            "qinglong_worker_certificates_earliest_expiry_timestamp_seconds",
            "When the first of the active Workers' certificates expires (recorded by qinglong worker enroll/renew)",
            value=earliest / 1000,
        ))  # fmt: skip
    if isinstance(unrecorded := found.get("unrecorded"), int):
        families.append(GaugeMetricFamily(
            "qinglong_worker_certificates_unrecorded",
            "Active Workers whose certificate expiry was never recorded (enrolled before it was: renew them)",
            value=unrecorded,
        ))  # fmt: skip
    registry = CollectorRegistry()
    registry.register(_Families(families))
    return generate_latest(registry)


class _Families(Collector):
    def __init__(self, families: list[GaugeMetricFamily]) -> None:
        self._families = families

    def collect(self) -> Iterable[GaugeMetricFamily]:
        return self._families


def make_admin_app(
    db: Database, *, registry: CollectorRegistry = REGISTRY, processes_up: Callable[[], bool] | None = None
) -> web.Application:
    """Loopback-only plain HTTP: Prometheus /metrics (of `registry`) and /healthz (200 when the database
    answers and, in a shell of several processes, `processes_up()`: every child listening); any other
    path or method is qinglong/error@v1 like the other listeners'."""

    async def metrics(request: web.Request) -> web.Response:
        body = generate_latest(registry) + await _database_families(db)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(request: web.Request) -> web.Response:
        if processes_up is not None and not processes_up():
            return web.json_response({"status": "process_down"}, status=HTTPStatus.SERVICE_UNAVAILABLE)
        ok = await db.healthy()
        if not ok:
            return web.json_response({"status": "storage_unavailable"}, status=ERRORS["storage.unavailable"].status)
        try:  # warnings long before a limit: still 200, the shell serves
            warnings = (await db.call("storage_health_v1", {})).get("warnings", [])
        except (StorageError, BadProjection):
            warnings = ["storage.health_unknown"]
        return web.json_response({"status": "ok", "warnings": warnings})

    app = web.Application(middlewares=[_unrouted_answers], handler_args=HANDLER_ARGS)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    return app
