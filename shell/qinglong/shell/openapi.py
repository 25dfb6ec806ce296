"""The OpenAPI 3.1 document of every shell route, generated from routes.ROUTES and the wire
declarations, so it cannot drift from what the shell accepts. Each route's error answers come from
the error table (qinglong.wire.errors.ERRORS): every status the route can answer, with the codes it
can answer under it as the enum of `code`; the codes no route answers (scope "unrouted") are
`components.responses`, one per code. Touches nothing: pure functions.
"""

from __future__ import annotations

import re
from http import HTTPStatus
from typing import Any, Final

from qinglong.shell.routes import ROUTES, Route
from qinglong.wire import ErrorMessage, Message, Record, Variants, activation
from qinglong.wire.common import NAME_PATTERN, SECRET_NAME_PATTERN
from qinglong.wire.errors import ERRORS, route_errors
from qinglong.wire.fields import Base64Bytes, Bool, Enum, Int, List, Map, Nested, Null, Spec, Str, Token, Uuid
from qinglong.wire.notify import RULE_NAME_PATTERN
from qinglong.wire.specs import BASE64URL_32_PATTERN, UUID_PATTERN

ERROR_REF: Final = {"$ref": "#/components/schemas/Error"}
SECURITY: Final[dict[str, list[dict[str, list[str]]]]] = {
    "user": [{"bearer": []}],
    "worker-open": [{"mtls": []}],
    "worker": [{"mtls": [], "ql3w": []}],
}


def spec_schema(spec: Spec) -> dict[str, Any]:
    """JSON Schema of one declared field type."""
    if isinstance(spec, Int):
        return {"type": "integer", "minimum": spec.lo, "maximum": spec.hi}
    if isinstance(spec, Uuid):
        return {"type": "string", "format": "uuid", "pattern": f"^{UUID_PATTERN}$"}
    if isinstance(spec, Token):
        return {"type": "string", "pattern": f"^{BASE64URL_32_PATTERN}$"}
    if isinstance(spec, Enum):
        return {"enum": [*spec.values]}
    if isinstance(spec, Bool):
        return {"type": "boolean"}
    if isinstance(spec, Null):
        return {"type": "null"}
    if isinstance(spec, Base64Bytes):
        return {"type": "string", "contentEncoding": "base64", "maxLength": 4 * ((spec.max_bytes + 2) // 3)}
    if isinstance(spec, Str):
        schema: dict[str, Any] = {"type": "string", "minLength": spec.min_len, "maxLength": spec.max_len}
        if spec.pattern is not None:
            schema["pattern"] = f"^(?:{spec.pattern})$"
        return schema
    if isinstance(spec, Nested):
        return record_schema(spec.record)
    if isinstance(spec, List):
        return {
            "type": "array",
            "items": spec_schema(spec.item),
            "minItems": spec.min_items,
            "maxItems": spec.max_items,
        }
    if isinstance(spec, Map):
        return {
            "type": "object",
            "additionalProperties": spec_schema(spec.value),
            "maxProperties": spec.max_items,
        }
    raise TypeError(f"no JSON Schema for {spec!r}")


def record_schema(cls: type[Record]) -> dict[str, Any]:
    """Exact object schema: every declared field, nothing else."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    if issubclass(cls, Message):
        properties["schema"] = {"const": cls.SCHEMA}
        required.append("schema")
    for f in cls.FIELDS:
        schema = spec_schema(f.spec)
        properties[f.name] = {"anyOf": [schema, {"type": "null"}]} if f.nullable else schema
        if not f.optional:
            required.append(f.name)
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _response_schema(response: Variants[Any] | type[Message]) -> dict[str, Any]:
    if isinstance(response, Variants):
        return {"oneOf": [record_schema(v) for v in response.by_status.values()]}
    return record_schema(response)


def _error_response(description: str, codes: list[str]) -> dict[str, Any]:
    schema = {"allOf": [ERROR_REF, {"properties": {"code": {"enum": codes}}}]}
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def error_responses(route: Route) -> dict[str, Any]:
    """Every error status the route can answer, each with the codes it can answer under it."""
    codes: dict[int, list[str]] = {}
    for error in route_errors(
        route.audience, body=route.request is not None, query=route.query is not None, sealing=route.sealing is not None
    ):
        codes.setdefault(error.status, []).append(error.code)
    return {str(status): _error_response(HTTPStatus(status).phrase, names) for status, names in sorted(codes.items())}


def unrouted_responses() -> dict[str, Any]:
    """The answers no route gives (a route's path with another method), by code."""
    return {
        error.code: _error_response(f"{error.status} {HTTPStatus(error.status).phrase}: {error.meaning}", [error.code])
        for error in ERRORS.values()
        if error.scope == "unrouted"
    }


def _operation(route: Route) -> dict[str, Any]:
    params: list[dict[str, Any]] = [
        {
            "name": name,
            "in": "path",
            "required": True,
            "schema": {"type": "string", "pattern": f"^{UUID_PATTERN}$"},
        }
        for name in re.findall(r"\{(\w+Id)\}", route.path)
    ]
    if "{project}" in route.path:
        params.append({
            "name": "project", "in": "path", "required": True, "description": "the project's id or unique name",
            "schema": {"type": "string", "pattern": f"^{NAME_PATTERN}$"},
        })  # fmt: skip
    if "{task}" in route.path:
        params.append({
            "name": "task", "in": "path", "required": True, "description": "the task's unique name in the project",
            "schema": {"type": "string", "pattern": f"^{NAME_PATTERN}$"},
        })  # fmt: skip
    if "{name}" in route.path:
        params.append({
            "name": "name", "in": "path", "required": True, "description": "the secret's name",
            "schema": {"type": "string", "pattern": f"^{SECRET_NAME_PATTERN}$"},
        })  # fmt: skip
    if "{rule}" in route.path:
        params.append({
            "name": "rule", "in": "path", "required": True, "description": "the notification rule's name",
            "schema": {"type": "string", "pattern": f"^{RULE_NAME_PATTERN}$"},
        })  # fmt: skip
    if route.query is not None:
        params += [
            {"name": f.name, "in": "query", "required": False, "schema": spec_schema(f.spec)}
            for f in route.query.FIELDS
        ]
    if "{phase}" in route.path:
        params.append(
            {
                "name": "phase",
                "in": "path",
                "required": True,
                "schema": {"enum": list(activation.PHASES)},
            }
        )
    op: dict[str, Any] = {
        "operationId": route.name,
        "summary": f"calls ql_api.{route.function}",
        "parameters": params,
        "responses": {
            "200" if not route.accepted else "202": {
                "description": "the function's result, checked against the response contract",
                "content": {"application/json": {"schema": _response_schema(route.response)}},
            },
            **error_responses(route),
        },
        "security": SECURITY[route.audience],
    }
    if route.accepted:
        replay = {"application/json": {"schema": _response_schema(route.response)}}
        op["responses"]["200"] = {"description": "a replay: the state the first call left", "content": replay}
    if route.request is not None:
        contracts = {route.request({"phase": phase}) for phase in activation.PHASES}
        schemas = [record_schema(c) for c in sorted(contracts, key=lambda c: c.__name__)]
        body = schemas[0] if len(schemas) == 1 else {"oneOf": schemas}
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    if route.permission:
        op["description"] = f"Needs `{route.permission}` on the project; admitted and audited before the body is read."
    return op


def openapi_document() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for route in ROUTES:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route)
    return {
        "openapi": "3.1.0",
        "info": {"title": "Qinglong remote worker control", "version": "3"},
        "paths": paths,
        "components": {
            "schemas": {"Error": record_schema(ErrorMessage)},
            "responses": unrouted_responses(),
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "mtls": {"type": "mutualTLS"},
                "ql3w": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "Authorization",
                    "description": "ql3w worker=…, session=…, gen=…, ts=…, sig=… (see qinglong.wire.ql3w)",
                },
            },
        },
    }
