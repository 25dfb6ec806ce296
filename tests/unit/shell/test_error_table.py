"""The shell answers from the error table (qinglong.wire.errors.ERRORS): a refusal takes its status from
its code, a code outside the table fails at construction, every code app.py names is in the table, the
OpenAPI document lists under each route exactly the statuses and codes the table gives that route, and the
codes no route answers as components.responses.
Touches nothing; reads shell/qinglong/shell/app.py and listener.py (their syntax trees, for the codes they
name).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from qinglong.shell import app, listener
from qinglong.shell.openapi import openapi_document
from qinglong.shell.routes import ROUTES, Route
from qinglong.wire import ErrorMessage, ql3w
from qinglong.wire.errors import ERRORS, ErrorCode


def test_a_refusal_answers_with_its_codes_status() -> None:
    for name, status in [("wire.too_large", 413), ("request.unsupported_media_type", 415), ("internal.error", 500)]:
        response = app.Refusal(name, "a rule").response("req-1")
        assert response.status == status == ERRORS[name].status
        assert isinstance(response.body, bytes)
        body = ErrorMessage.parse(response.body)
        assert (body.code, body.message, body.request_id) == (name, "a rule", "req-1")


def test_a_code_outside_the_table_fails_at_construction() -> None:
    with pytest.raises(KeyError, match=r"request\.teapot"):
        app.Refusal("request.teapot", "no such code")


def test_every_code_app_py_and_listener_py_name_is_in_the_table() -> None:
    named = {
        node.args[0].value
        for module in (app, listener)
        for node in ast.walk(ast.parse(Path(module.__file__ or "").read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("Refusal", "unrouted")
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }
    assert {"request.too_large", "internal.error", "storage.unavailable", "request.header_too_large"} <= named
    named |= set(app.ADMISSION_CODES.values()) | {ql3w.BAD_HEADER, ql3w.EXPIRED}
    assert named - set(ERRORS) == set()


def _answers(error: ErrorCode, route: Route) -> bool:
    """The table's scopes, read independently of route_errors."""
    return {
        "any": True,
        "body": route.request is not None,
        "input": route.request is not None or route.query is not None,
        "worker": route.audience in ("worker", "worker-open"),
        "signed": route.audience == "worker",
        "user": route.audience == "user",
        "sealing": route.sealing is not None,
        "unrouted": False,
    }[error.scope]


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.name)
def test_openapi_lists_exactly_the_routes_statuses_and_codes(route: Route) -> None:
    op = openapi_document()["paths"][route.path][route.method.lower()]
    listed: dict[int, list[str]] = {}
    for status, response in op["responses"].items():
        if not status.startswith("2"):
            schema = response["content"]["application/json"]["schema"]
            listed[int(status)] = schema["allOf"][1]["properties"]["code"]["enum"]
    expected: dict[int, list[str]] = {}
    for error in ERRORS.values():
        if _answers(error, route):
            expected.setdefault(error.status, []).append(error.code)
    assert listed == expected
    assert {400, 404, 431, 500, 503} <= set(listed)
    assert 405 not in listed
    if route.request is None:
        assert not {413, 415} & set(listed)
    else:
        assert {413, 415} <= set(listed)
    assert (403 in listed) == (route.audience == "user")


def test_openapi_lists_the_codes_no_route_answers_as_components() -> None:
    responses = openapi_document()["components"]["responses"]
    assert set(responses) == {code for code, error in ERRORS.items() if error.scope == "unrouted"}
    assert set(responses) == {"request.method_not_allowed"}
    for code, response in responses.items():
        schema = response["content"]["application/json"]["schema"]
        assert schema["allOf"][1]["properties"]["code"]["enum"] == [code]
        assert response["description"].startswith(f"{ERRORS[code].status} ")
