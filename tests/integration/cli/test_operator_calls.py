"""Every operator call the CLI can make names exactly the input parameters of its deployed ql_api routine. The
calls are the typed stubs of qinglong.cli.operators (Transaction.call, admin.call and converge_once take nothing
else, and mypy checks each call site's keywords against its stub); each stub's name, kind (function or procedure)
and parameters, in order, are the routine's in pg_proc (proargnames by proargmodes, input parameters only). A stub
with a wrong, extra or missing name is caught, and a call that does not name its arguments is refused.
Touches: one fresh database (catalog reads only).
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from qinglong.cli import operators as op
from qinglong.cli.operators import OPERATORS, Operator
from tests.conftest import Database

ROUTINE = """
select p.prokind, p.proargnames, coalesce(p.proargmodes::text[], array_fill('i'::text, array[p.pronargs]))
from pg_catalog.pg_proc p join pg_catalog.pg_namespace n on n.oid = p.pronamespace
where n.nspname = 'ql_api' and p.proname = %s
"""


def mismatch(conn: psycopg.Connection[Any], operator: Operator[...]) -> str | None:
    """How the stub differs from the deployed routine of its name, or None."""
    rows = conn.execute(ROUTINE, (operator.name,)).fetchall()
    if len(rows) != 1:
        return f"ql_api.{operator.name}: {len(rows)} routines of that name"
    kind, names, modes = rows[0]
    if kind != ("p" if operator.procedure else "f"):
        return f"ql_api.{operator.name}: prokind {kind}"
    inputs = tuple(name for name, mode in zip(names or [], modes, strict=False) if mode in ("i", "b", "v"))
    if inputs != operator.parameters:
        return f"ql_api.{operator.name}: takes {inputs}, the CLI names {operator.parameters}"
    return None


@pytest.mark.db
def test_every_operator_call_names_exactly_its_routine_s_parameters(database: Database) -> None:
    assert len(OPERATORS) == 22 and op.converge in OPERATORS  # every stub, the procedure too
    with psycopg.connect(database.dsn()) as conn:
        wrong = [m for o in OPERATORS if (m := mismatch(conn, o))]
    assert not wrong, "\n".join(wrong)


# Stubs that are wrong, as a mistyped declaration in qinglong.cli.operators would be.
def task_create_v1(*, p_project: str, p_name: str, p_plan: dict[str, Any]) -> None:
    """ql_api.task_create_v1 takes p_project_id."""


def project_create_v1(*, p_name: str, p_owner: str) -> None:
    """ql_api.project_create_v1 takes p_name alone."""


def task_schedule_set_v1(*, p_project_id: str, p_name: str, p_cron: str, p_timezone: str) -> None:
    """ql_api.task_schedule_set_v1 takes p_overlap too (it has a default: named calls name it all the same)."""


def task_schedule_show_v1(*, p_name: str, p_project_id: str, p_count: int) -> None:
    """ql_api.task_schedule_show_v1 takes p_project_id first."""


def worker_list_v9() -> None:
    """No such function."""


def task_list_v1(*, p_project: str) -> None:
    """Right names, declared a procedure below: ql_api.task_list_v1 is a function, called with `select`."""


@pytest.mark.db
@pytest.mark.parametrize(
    ("stub", "procedure", "expected"),
    [
        (task_create_v1, False, "takes ('p_project_id', 'p_name', 'p_plan', 'p_plan_signature'), the CLI names "),
        (project_create_v1, False, "takes ('p_name',), the CLI names ('p_name', 'p_owner')"),
        (task_schedule_set_v1, False, "takes ('p_project_id', 'p_name', 'p_cron', 'p_timezone', 'p_overlap'), "),
        (task_schedule_show_v1, False, "takes ('p_project_id', 'p_name', 'p_count'), the CLI names ('p_name', "),
        (worker_list_v9, False, "ql_api.worker_list_v9: 0 routines of that name"),
        (task_list_v1, True, "ql_api.task_list_v1: prokind f"),
    ],
)
def test_a_wrong_stub_is_caught(database: Database, stub: Any, procedure: bool, expected: str) -> None:
    with psycopg.connect(database.dsn()) as conn:
        found = mismatch(conn, Operator(stub, procedure=procedure))
    assert found is not None and expected in found


def test_a_call_names_its_arguments_as_identifiers() -> None:
    query, params = op.task_create_v1.statement(
        p_project_id="x", p_name="backup", p_plan={"argv": ["true"]}, p_plan_signature=None
    )
    assert query.as_string() == (
        'select "ql_api"."task_create_v1"("p_project_id" => %(p_project_id)s, "p_name" => %(p_name)s, '
        '"p_plan" => %(p_plan)s, "p_plan_signature" => %(p_plan_signature)s)'
    )
    assert list(params) == ["p_project_id", "p_name", "p_plan", "p_plan_signature"]
    assert params["p_plan"].obj == {"argv": ["true"]} and params["p_plan_signature"] is None
    assert op.converge.statement(p_page_size=1, p_max_pages=2, p_grace_ms=3)[0].as_string().startswith("call ")


def test_a_call_that_does_not_name_its_arguments_is_refused() -> None:
    with pytest.raises(TypeError):
        op.project_create_v1.statement("demo")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        op.project_create_v1.statement(p_nam="demo")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        op.task_list_v1.statement()  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="not declared"):  # only the declared stubs are called
        Operator(worker_list_v9).statement()


def positional_v1(p_name: str) -> None:
    """A parameter a call could pass by position."""


def unprefixed_v1(*, name: str) -> None:
    """Not a p_… name."""


def defaulted_v1(*, p_name: str = "x") -> None:
    """A parameter a call could leave out."""


@pytest.mark.parametrize("stub", [positional_v1, unprefixed_v1, defaulted_v1])
def test_a_stub_takes_only_keyword_only_p_parameters_without_defaults(stub: Any) -> None:
    with pytest.raises(ValueError):
        Operator(stub)
