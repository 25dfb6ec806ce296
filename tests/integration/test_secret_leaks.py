"""Project secrets leak nowhere and are masked, short (the long run: bench/secrets.py, part (i)): the engine of
tests.support.leaks with ten secrets, two of them rotated while their task still prints, on real parts (a
PostgreSQL cluster logging every statement: the session's private cluster, its log searched from where this run
began, in a database copied from its deployed template; the real shell with a key-encryption key, a real Worker process,
real tasks). Each value and its encodings is searched for in the PostgreSQL log, `pg_dump --data-only`, the
shell's and the Worker's logs and files, the events and every user API answer: zero hits; every printed form
of every value is masked in the stored output; a Worker of another pool gets no secret; and a plain `--env`
value of a control task IS found where the search looks, so the zeros mean something.
Touches: a folder under /tmp, removed (every folder of the run), a database of the private cluster (dropped
after), loopback ports, the processes it starts. About 25 s on 2 cores.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.conftest import PrivateCluster
from tests.support.env import Place
from tests.support.leaks import FORMS, LeakConfig, run_leaks

pytestmark = pytest.mark.db


def test_ten_secrets_leak_nowhere_and_every_printed_form_is_masked(private_cluster: PrivateCluster) -> None:
    root = Path(tempfile.mkdtemp(prefix="ql-leaks-", dir="/tmp"))
    root.chmod(0o755)  # the postgres OS user must traverse it
    try:
        place = Place(private_cluster.cluster, private_cluster.template)
        found = run_leaks(root / "leaks", LeakConfig(secrets=10, rotations=2), place)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    counts = found.counts()
    shown = json.dumps(counts, indent=1)
    assert counts["runs"] == counts["runs_succeeded"] == 11, (found.runs, shown)
    assert counts["secrets_tried"] >= 10, shown
    assert found.hits == [], shown
    assert counts["mask_cases"] == 10 * (len(FORMS) + 1), shown
    assert found.mask_misses == [], shown
    assert counts["rotations_under_load"] == 2, shown
    assert counts["stale_calls"] > 0 and counts["deliveries_to_stale_workers"] == 0, shown
    assert {"postgresql log", "pg_dump --data-only"} <= set(found.control_found_in), found.control_found_in
    assert any(place.startswith("worker file") for place in found.control_found_in), found.control_found_in
