"""Bundles and signed plans on real parts (tests/support/bundle_attacks.py at a small size): a folder shipped with
`qinglong task create --bundle --sign` runs from the bundle, the second Run from the Worker's cache; every bundle
attack and every plan not signed as it runs is refused with its code, nothing spawned and nothing written outside
the Run's directory. Touches: a database copied from the session cluster's template (dropped after), the shell
and Worker processes it starts, a folder under /tmp (removed).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

from qinglong.devdb import Cluster
from tests.support.bundle_attacks import BundleConfig, run_bundle_attacks
from tests.support.env import Place

pytestmark = pytest.mark.db

BUNDLE_CODES = {
    "tar-slip": "bundle.path_dotdot",
    "tar-slip-nested": "bundle.path_dotdot",
    "absolute-path": "bundle.path_absolute",
    "symlink": "bundle.link",
    "hardlink": "bundle.link",
    "device": "bundle.special_file",
    "fifo": "bundle.special_file",
    "file-count-bomb": "bundle.too_many_entries",
    "size-bomb": "bundle.too_large_unpacked",
    "compression-bomb": "bundle.ratio",
    "truncated": "bundle.truncated",
    "random-bytes": "bundle.corrupt",
    "duplicate-entry": "bundle.duplicate",
    "chunks-changed": "bundle.digest_mismatch",
    "bundle-swapped": "bundle.digest_mismatch",
}
PLAN_CODES = {
    "unsigned": "plan.unsigned",
    "unknown-key": "plan.signer_unknown",
    "argv-edited": "plan.signature_invalid",
    "bundle-edited": "plan.signature_invalid",
    "copied-to-another-project": "plan.signature_invalid",
}


def test_bundles_run_from_the_cache_and_every_attack_is_refused_with_nothing_spawned(
    cluster: Cluster, template_db: str
) -> None:
    root = Path(tempfile.mkdtemp(prefix="ql-bundles-", dir="/tmp"))
    root.chmod(0o755)  # the postgres OS user must traverse it
    try:
        # On the session cluster, in a copy of its deployed template: no cluster and deploy of its own.
        found = run_bundle_attacks(root / "bundles", BundleConfig(fetch_mib=2), Place(cluster, template_db))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    counts = found.counts()
    shown = json.dumps(counts, indent=1, sort_keys=True)
    print(shown)
    assert found.honest == {"first": "succeeded", "second": "succeeded"} and found.honest_output_ok == 2, shown
    assert counts["cache_hit_runs"] == 1 and counts["fetch_mib"] >= 2, shown
    assert found.bundle_attacks == BUNDLE_CODES, shown
    assert found.plan_attacks == PLAN_CODES, shown
    assert found.spawned == [] and found.escaped == [], shown
    assert counts["bundle_attacks_spawned"] == 0 and counts["unsigned_plans_spawned"] == 0, shown
