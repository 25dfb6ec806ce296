"""A renewal that answers after a cancellation committed says stop_requested, never renewed (before, a renewal could
answer `renewed` 1.5 s after a cancel committed `accepted`). The renewal's fast path reads the Run without a lock in
its one UPDATE, whose view is as of the statement's start, and a wait for the Lease row re-checks only the Lease: so
a renewal whose statement began before the cancel and finished after it saw no intent. Here another transaction holds
the Lease row, the renewal starts and waits for it, the cancel commits, the Lease row is released: the answer must
carry the intent. Touches: one fresh database (fixture rows and the intent as the deployer; the renewal as
ql_runtime).
"""

from __future__ import annotations

import threading
from typing import Any, Final

import psycopg
import pytest

from tests.conftest import Database
from tests.integration.db.factories import (
    activate,
    await_lock_wait,
    call,
    make_project,
    make_revision,
    make_runs,
    make_worker,
    open_session,
    pull,
)

pytestmark = [pytest.mark.db, pytest.mark.race]

RENEW: Final = "ql_api.attempt_lease_control_v1(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"


def test_a_renewal_answering_after_a_committed_cancel_says_stop_requested(database: Database) -> None:
    with (
        psycopg.connect(database.dsn(), autocommit=True) as admin,
        psycopg.connect(database.dsn(), autocommit=True) as holder,
        psycopg.connect(database.runtime_dsn, autocommit=True) as rt,
        psycopg.connect(database.runtime_dsn, autocommit=True) as renewer,
    ):
        make_runs(admin, make_revision(admin, make_project(admin), {"argv": ["true"]}), 1)
        worker = open_session(rt, make_worker(admin), 1)
        offer = pull(rt, worker)
        assert activate(rt, worker, offer, "starting")["status"] == "applied"
        version = activate(rt, worker, offer, "running")["snapshot"]["leaseVersion"]
        pid = renewer.info.backend_pid
        answers: list[dict[str, Any]] = []
        with holder.transaction():
            holder.execute("select 1 from ql.run_leases where attempt_id = %s for update", (offer.attempt_id,))
            thread = threading.Thread(
                target=lambda: answers.append(call(renewer, RENEW, (*worker.head, *offer.fence, version)))
            )
            thread.start()
            await_lock_wait(admin, "pid = %s", (pid,))  # the renewal waits for the Lease row
            with admin.transaction():
                cur = admin.execute(
                    "select ql.run_cancel_intent(%s, 'user', 'system', null, ql.now_ms())", (offer.run_id,)
                )
                assert cur.fetchone() is not None
        thread.join(timeout=10)
        assert not thread.is_alive()
        row = admin.execute("select cancel_reason from ql.runs where id = %s", (offer.run_id,)).fetchone()
        assert row == ("user",)
        assert answers[0]["status"] == "stop_requested", answers[0]
        assert answers[0]["stopReason"] == "user"
        assert answers[0]["leaseVersion"] == version + 1  # it did renew: the Worker has time to stop and complete
