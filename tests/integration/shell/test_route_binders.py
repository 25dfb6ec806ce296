"""Every route's binder names exactly the input parameters of its deployed ql_api function: for a real
parsed request of the route (one per request contract, drawn by the wire kit's `records()` strategy, and
for a GET that declares query parameters a parsed query with every parameter present),
the binder's keys are the function's input argument names (pg_proc.proargnames by proargmodes), of
which only parameters with defaults (pronargdefaults) may be left out. The admission call is checked
the same way. Touches: one fresh database (catalog reads only).
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import psycopg
import pytest
from hypothesis import find

from qinglong.shell.db import statement
from qinglong.shell.routes import ROUTES, Admission, Call, Route, SecretRefused, mint_token
from qinglong.shell.sealing import Sealed, Sealer
from qinglong.wire import Message, Query, SecretSetRequest, ql3w
from qinglong.wire.activation import PHASES
from qinglong.wire.common import token_digest
from tests.conftest import Database
from tests.unit.wire.kit import records

pytestmark = pytest.mark.db

ID = "0f0e0d0c-0b0a-4908-8706-050403020100"
PATH: Mapping[str, str] = {
    "workerId": ID, "sessionId": ID, "offerId": ID, "projectId": ID, "runId": ID, "project": ID, "name": "DB_PASSWORD",
    "task": "nightly-backup",
    "rule": "ops-hook",
}  # fmt: skip
SIGNATURE = """
select p.proargnames, coalesce(p.proargmodes::text[], array_fill('i'::text, array[p.pronargs])),
       p.pronargdefaults
from pg_catalog.pg_proc p join pg_catalog.pg_namespace n on n.oid = p.pronamespace
where n.nspname = 'ql_api' and p.proname = %s
"""


def parsed(cls: type[Message]) -> Message:
    """A valid request of the contract, as the shell parses it off the wire."""
    drawn: Message = find(records(cls), lambda _: True)
    return cls.parse(drawn.to_json())


def parsed_query(cls: type[Query]) -> Query:
    """A query with every parameter present, as the shell parses it off the query string."""
    drawn: Query = find(records(cls), lambda q: all(getattr(q, f.attr) is not None for f in cls.FIELDS))
    return cls.parse(drawn.to_query())


def calls(route: Route) -> Iterator[Call]:
    """One authenticated, admitted call per request contract the route can parse."""
    matches = [{**PATH, "phase": p} for p in PHASES] if "{phase" in route.path else [dict(PATH)]
    seen: set[type[Message] | None] = set()
    for match in matches:
        contract = None if route.request is None else route.request(match)
        if contract in seen:
            continue
        seen.add(contract)
        yield Call(
            match=match,
            body=None if contract is None else parsed(contract),
            keyring=ql3w.Keyring(b"\x00" * 32),
            worker_id=ID,
            session_id=ID,
            generation=1,
            cert_fingerprint=token_digest("certificate"),
            subject_id=ID,
            project_id=ID,
            project_version=1,
            binding_version=1,
            minted_token=mint_token(),
            query=None if route.query is None else parsed_query(route.query),
            sealer=Sealer(bytes(32)),
        )


def parameters(conn: psycopg.Connection[Any], function: str) -> tuple[list[str], set[str]]:
    """The deployed function's input parameter names, and those it has defaults for."""
    rows = conn.execute(SIGNATURE, (function,)).fetchall()
    assert len(rows) == 1, f"ql_api.{function}: {len(rows)} functions of that name"
    names, modes, defaults = rows[0]
    assert names is not None and len(names) == len(modes), f"ql_api.{function}: unnamed parameters"
    inputs = [name for name, mode in zip(names, modes, strict=True) if mode in ("i", "b", "v")]
    assert all(inputs), f"ql_api.{function}: an unnamed input parameter"
    return inputs, set(inputs[len(inputs) - defaults :])


def assert_binds(conn: psycopg.Connection[Any], function: str, keys: set[str], where: str) -> None:
    inputs, defaulted = parameters(conn, function)
    assert keys - set(inputs) == set(), f"{where}: binds what ql_api.{function} does not take"
    assert set(inputs) - keys <= defaulted, f"{where}: leaves out parameters of ql_api.{function} without defaults"
    statement(function, tuple(keys))  # and every name passes the shell's identifier check


def test_every_binder_names_exactly_its_function_s_parameters(database: Database) -> None:
    with psycopg.connect(database.dsn()) as conn:
        bound = 0
        for route in ROUTES:
            for call in calls(route):
                assert_binds(conn, route.function, set(route.bind(call)), f"{route.name} {call.match}")
                bound += 1
        assert bound == len(ROUTES) + 1  # the activation route parses two contracts
        for project in (ID, "project-name"):  # by id: request_admission_v1; by name: request_admission_v2
            function, admission = Admission.call(token_digest("bearer"), project, "run.read", "user.runs.read", "r-1")
            assert_binds(conn, function, set(admission), f"admission of {project}")


def test_a_binder_gets_only_its_route_s_request() -> None:
    pull, read, listing = (
        next(r for r in ROUTES if r.name == name) for name in ("worker.offers.pull", "user.runs.read", "user.runs.list")
    )
    (call,) = calls(next(r for r in ROUTES if r.name == "worker.session.heartbeat"))
    with pytest.raises(TypeError):
        pull.bind(call)
    with pytest.raises(TypeError):
        read.bind(call)
    with pytest.raises(TypeError):
        listing.bind(call)
    with pytest.raises(TypeError):  # no body, but no query parsed either: the binder refuses
        listing.bind(dataclasses.replace(call, body=None))
    (read_call,) = calls(read)
    with pytest.raises(TypeError):  # nor does it take another route's query (or none at all)
        listing.bind(read_call)


@pytest.mark.parametrize(
    ("function", "names"),
    [("offer_pull_v1", ["p_pull_id) --"]), ("offer_pull_v1", ["worker_id"]), ("pg_sleep", ["p_seconds"])],
)
def test_the_statement_takes_only_identifiers(function: str, names: list[str]) -> None:
    with pytest.raises(ValueError):
        statement(function, tuple(names))


def test_a_secret_value_is_sealed_before_it_is_bound() -> None:
    """The set route's binder binds the value's ciphertext only: no argument holds the value or an encoding of it,
    the version id is fresh for every call, and the bound fields open to the value under the admitted Project, the
    path's name and that version id."""
    value = b"never-bound-" + bytes(range(256))
    route = next(r for r in ROUTES if r.name == "user.secrets.set")
    (call,) = calls(route)
    call = dataclasses.replace(call, body=SecretSetRequest(mutation_id="m-1", value=value))
    args, again = route.bind(call), route.bind(call)
    assert args["p_version_id"] != again["p_version_id"] and args["p_ciphertext"] != again["p_ciphertext"]
    encodings = (value, value.hex().encode(), base64.b64encode(value), value[:16])
    for name, bound in args.items():
        raw = bound if isinstance(bound, bytes) else str(bound).encode()
        assert not any(e in raw for e in encodings), name
    assert (args["p_size"], len(args["p_ciphertext"])) == (len(value), len(value) + 16)  # type: ignore[arg-type]
    sealed = Sealed(str(args["p_kek_id"]), args["p_wrapped_key"], args["p_nonce"], args["p_ciphertext"])  # type: ignore[arg-type]
    assert call.sealer is not None
    opened = call.sealer.open(sealed, project_id=ID, name="DB_PASSWORD", version_id=str(args["p_version_id"]))
    assert opened == value
    with pytest.raises(SecretRefused):  # a shell without [secrets] seals nothing
        route.bind(dataclasses.replace(call, sealer=None))
