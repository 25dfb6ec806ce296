"""A soak of concurrent Lease renewals of ONE Worker creates no MultiXact: 8 connections each renew their own
running Attempt (one session, one Worker) as fast as they can, and the cluster's next MultiXactId
(pg_control_checkpoint() after a CHECKPOINT) does not move. Shared row locks on the session row (several
renewals holding it at once) would create one; the renewal's fast path takes none. Every renewal still
answers renewed with the next version, the Lease version ends where the renewals put it and the Attempt's stays.
Touches: one fresh database (fixture rows as the deployer; renewals as ql_runtime); CHECKPOINT of the test
cluster (the next MultiXactId is cluster-wide: the other tests do not run meanwhile).
"""

from __future__ import annotations

import threading
from typing import Any, Final

import psycopg
import pytest

from tests.conftest import Database
from tests.integration.db.factories import (
    activate,
    call,
    make_project,
    make_revision,
    make_runs,
    make_worker,
    open_session,
    pull,
)

pytestmark = pytest.mark.db

CONNECTIONS: Final = 8
RENEWALS: Final = 150  # per connection
RENEW: Final = "ql_api.attempt_lease_control_v1(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"


def next_multixact(conn: psycopg.Connection[Any]) -> int:
    conn.execute("checkpoint")
    row = conn.execute("select next_multixact_id::text::bigint from pg_control_checkpoint()").fetchone()
    assert row is not None
    return int(row[0])


def test_concurrent_renewals_of_one_worker_create_no_multixact(database: Database) -> None:
    with (
        psycopg.connect(database.dsn(), autocommit=True) as admin,
        psycopg.connect(database.runtime_dsn, autocommit=True) as rt,
    ):
        make_runs(admin, make_revision(admin, make_project(admin), {"argv": ["true"]}), CONNECTIONS)
        worker = open_session(rt, make_worker(admin), CONNECTIONS)
        offers = [pull(rt, worker) for _ in range(CONNECTIONS)]
        versions = []
        for offer in offers:
            assert activate(rt, worker, offer, "starting")["status"] == "applied"
            versions.append(activate(rt, worker, offer, "running")["snapshot"]["leaseVersion"])
        barrier = threading.Barrier(CONNECTIONS)
        answers: list[list[dict[str, Any]]] = [[] for _ in offers]
        errors: list[BaseException] = []

        def soak(i: int) -> None:
            try:
                with psycopg.connect(database.runtime_dsn, autocommit=True) as conn:
                    version = versions[i]
                    barrier.wait()
                    for _ in range(RENEWALS):
                        answer = call(conn, RENEW, (*worker.head, *offers[i].fence, version))
                        answers[i].append(answer)
                        version = answer.get("leaseVersion", version)
            except BaseException as exc:  # reported below
                errors.append(exc)

        before = next_multixact(admin)
        threads = [threading.Thread(target=soak, args=(i,)) for i in range(CONNECTIONS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        after = next_multixact(admin)
        assert not errors, errors
        for i, offer in enumerate(offers):
            assert [(a["status"], a["leaseVersion"]) for a in answers[i]] == [
                ("renewed", versions[i] + n) for n in range(1, RENEWALS + 1)
            ]
            row = admin.execute(
                "select l.version, a.version from ql.run_leases l join ql.run_attempts a on a.id = l.attempt_id"
                " where l.attempt_id = %s",
                (offer.attempt_id,),
            ).fetchone()
            assert row == (versions[i] + RENEWALS, 3), "the Lease: its renewals; the Attempt: claimed 1, two ACKs"
        assert after - before == 0, f"{after - before} MultiXacts in {CONNECTIONS * RENEWALS} renewals"
