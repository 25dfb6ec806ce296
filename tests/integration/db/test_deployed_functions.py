"""A full `sqitch deploy` leaves exactly the bodies of db/functions in the database: re-running
each function file over the deployed template changes no definition, owner or privilege.
Touches: one fresh database."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from tests.conftest import Database

pytestmark = pytest.mark.db

REPO = Path(__file__).resolve().parents[3]
CATALOG = """
select p.oid::regprocedure::text, pg_get_functiondef(p.oid), pg_get_userbyid(p.proowner),
       coalesce(p.proacl::text, ''), obj_description(p.oid, 'pg_proc')
from pg_proc p join pg_namespace n on n.oid = p.pronamespace
where n.nspname in ('ql', 'ql_api') order by 1
"""


def test_deployed_functions_equal_loading_db_functions(database: Database) -> None:
    with psycopg.connect(database.dsn(), autocommit=True) as conn:
        deployed = conn.execute(CATALOG).fetchall()
        assert len(deployed) >= len(list((REPO / "db" / "functions").rglob("*.sql")))
        for path in sorted((REPO / "db" / "functions").rglob("*.sql")):
            with conn.transaction():
                conn.execute("set local role ql_owner")
                conn.execute(path.read_text().encode())
        assert conn.execute(CATALOG).fetchall() == deployed
