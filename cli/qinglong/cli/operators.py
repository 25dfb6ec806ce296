"""The ql_api routines the CLI calls over its DBA connection, one typed stub each: the stub's name is the routine's,
its keyword-only parameters are the routine's input parameters by name. So mypy checks every call's argument names,
and tests/integration/cli/test_operator_calls.py checks every stub against pg_proc. Touches nothing.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Generic, ParamSpec

if TYPE_CHECKING:
    from psycopg import sql

P = ParamSpec("P")
_FUNCTION: Final = re.compile(r"[a-z_][a-z0-9_]*_v[0-9]+")  # a versioned ql_api function
_PROCEDURE: Final = re.compile(r"[a-z_][a-z0-9_]*")
_PARAMETER: Final = re.compile(r"p_[a-z0-9_]+")


class Operator(Generic[P]):
    """A ql_api function (`select`) or procedure (`call`), its parameters named by a stub's signature."""

    def __init__(self, stub: Callable[P, None], *, procedure: bool = False) -> None:
        self.name, self.procedure = stub.__name__, procedure
        self.signature = inspect.signature(stub)
        self.parameters = tuple(self.signature.parameters)
        if not (_PROCEDURE if procedure else _FUNCTION).fullmatch(self.name):
            raise ValueError(f"not a ql_api routine name: {self.name!r}")
        for p in self.signature.parameters.values():
            if p.kind is not p.KEYWORD_ONLY or p.default is not p.empty or not _PARAMETER.fullmatch(p.name):
                raise ValueError(f"ql_api.{self.name}: {p.name} is not a keyword-only p_… parameter without default")

    def statement(self, *args: P.args, **kwargs: P.kwargs) -> tuple[sql.Composed, dict[str, Any]]:
        """`select ql_api.<name>(p_a => %(p_a)s, …)` (`call` for a procedure) and its parameters (a mapping or a
        list as jsonb: no routine takes an array), every argument named: a positional, missing or unknown one
        raises TypeError."""
        from psycopg import sql  # here: a command without a database does not import psycopg
        from psycopg.types.json import Jsonb

        if self not in OPERATORS:
            raise ValueError(f"ql_api.{self.name} is not declared in qinglong.cli.operators")
        arguments = self.signature.bind(*args, **kwargs).arguments
        named = (sql.SQL("{} => {}").format(sql.Identifier(k), sql.Placeholder(k)) for k in arguments)
        verb = sql.SQL("call" if self.procedure else "select")
        query = sql.SQL("{} {}({})").format(verb, sql.Identifier("ql_api", self.name), sql.SQL(", ").join(named))
        return query, {k: Jsonb(v) if isinstance(v, Mapping | list) else v for k, v in arguments.items()}


def procedure(stub: Callable[P, None]) -> Operator[P]:
    return Operator(stub, procedure=True)


@Operator
def project_create_v1(*, p_name: str) -> None:
    """A project, idempotent by name."""


@Operator
def project_list_v1() -> None:
    """Every project."""


@Operator
def subject_create_v1(*, p_kind: str, p_name: str, p_token_digest: bytes) -> None:
    """A subject of the user API and its bearer token's digest."""


@Operator
def subject_list_v1() -> None:
    """Every subject with its roles."""


@Operator
def subject_status_set_v1(*, p_subject: str, p_active: bool) -> None:
    """Disable or enable a subject (by name or id)."""


@Operator
def role_binding_set_v1(*, p_project_id: str, p_subject_id: str, p_role: str, p_active: bool) -> None:
    """Grant, change or revoke a subject's role in a project."""


@Operator
def worker_enroll_v1(*, p_worker_id: str, p_name: str, p_pool: str, p_cert_fingerprint: bytes) -> None:
    """Enrol a Worker, or re-enrol it (a new generation)."""


@Operator
def worker_certificate_renew_v1(*, p_worker_id: str, p_cert_fingerprint: bytes, p_not_after_ms: int) -> None:
    """Record a Worker's new certificate and its expiry (same generation)."""


@Operator
def worker_list_v1() -> None:
    """Every Worker."""


@Operator
def worker_status_set_v1(*, p_worker: str, p_active: bool) -> None:
    """Disable or enable a Worker (by name or id)."""


@Operator
def pool_list_v1() -> None:
    """Every pool a Worker or a setting names, with its Lease length."""


@Operator
def pool_lease_set_v1(*, p_pool: str, p_lease_ms: int | None) -> None:
    """Set (or, with None, clear) a pool's Lease length."""


@Operator
def task_create_v1(
    *, p_project_id: str, p_name: str, p_plan: Mapping[str, Any], p_plan_signature: Mapping[str, Any] | None
) -> None:
    """A task, or a new revision of it (its plan signed by an operator key, or not)."""


@Operator
def task_revision_view_v1(*, p_revision_id: str) -> None:
    """A task revision: its plan, its signature and its bundle's file list."""


@Operator
def bundle_stat_v1(*, p_digest: str) -> None:
    """Whether a bundle is stored, partly uploaded or missing."""


@Operator
def bundle_put_v1(*, p_digest: str, p_size_bytes: int, p_index: int, p_data: bytes) -> None:
    """One chunk of a bundle."""


@Operator
def bundle_seal_v1(*, p_digest: str, p_entries: list[Mapping[str, Any]]) -> None:
    """Check a bundle's chunks against its digest and store its file list."""


@Operator
def task_list_v1(*, p_project: str) -> None:
    """A project's tasks (the project by name or id)."""


@Operator
def task_status_set_v1(*, p_project: str, p_task: str, p_active: bool) -> None:
    """Disable or enable a task (each by name or id)."""


@Operator
def task_schedule_set_v1(
    *, p_project_id: str, p_name: str, p_cron: str | None, p_timezone: str, p_overlap: str
) -> None:
    """Set or clear (a null cron) a task's schedule."""


@Operator
def task_schedule_show_v1(*, p_project_id: str, p_name: str, p_count: int) -> None:
    """A task's schedule, its next and its last fire times."""


@procedure
def converge(*, p_page_size: int, p_max_pages: int, p_grace_ms: int) -> None:
    """One convergence cycle (it commits per page: autocommit)."""


OPERATORS: Final[tuple[Operator[...], ...]] = tuple(v for v in list(globals().values()) if isinstance(v, Operator))
