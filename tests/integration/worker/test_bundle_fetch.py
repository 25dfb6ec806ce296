"""A task's bundle on a real Worker, against the real shell and PostgreSQL (decision 0017): the Worker fetches
it chunk by chunk before the starting ACK, and a chunk whose answer was lost (the shell answered, the Worker
never heard) is asked for again: the Run succeeds with the script from the bundle, and no other chunk is fetched
twice. A fetch by anyone but the holder of the current Lease is refused (another token, a Lease that expired):
the shell gives no byte. A fetch that cannot finish within the Worker's limit is the start failure
`bundle.fetch_timeout`, nothing spawned.
Touches: a fresh database, the in-process shell on TLS 1.3 loopback, real task processes, temporary folders.
"""

from __future__ import annotations

import base64
import hashlib
import os
import uuid
from pathlib import Path

import pytest

from qinglong.wire.bundle import CHUNK_BYTES, pack
from qinglong.wire.bundle_fetch import BundleChunkRequest
from qinglong.worker.bundles import BundleCache
from qinglong.worker.client import Refused
from tests.integration.worker.conftest import ENDED_RUN, Rig

pytestmark = pytest.mark.db


def store(rig: Rig, folder: Path) -> str:
    """Pack `folder` and store it as the CLI does (chunks, then the seal): its digest."""
    packed = pack(folder)
    count = -(-len(packed.data) // CHUNK_BYTES)
    for i in range(count):
        rig.one("select ql_api.bundle_put_v1(%s, %s, %s, %s)",
                (packed.digest, len(packed.data), i, packed.data[i * CHUNK_BYTES : (i + 1) * CHUNK_BYTES]))  # fmt: skip
    assert rig.one("select ql_api.bundle_seal_v1(%s, '[]'::jsonb) ->> 'status'", (packed.digest,)) == "sealed"
    return packed.digest


def scripts(tmp_path: Path, data_bytes: int) -> Path:
    folder = tmp_path / "scripts"
    folder.mkdir()
    (folder / "run.sh").write_text("echo from the bundle; wc -c < data.bin\n")
    (folder / "data.bin").write_bytes(hashlib.shake_256(b"bundle").digest(data_bytes))
    return folder


async def test_a_lost_chunk_answer_is_asked_again_and_the_run_succeeds(rig: Rig, tmp_path: Path) -> None:
    digest = store(rig, scripts(tmp_path, 3 * CHUNK_BYTES))
    run = rig.add_run({"argv": ["sh", "run.sh"], "bundle": digest, "timeoutMs": 60000})
    rig.served.lose["bundle-chunks"] = 1  # the first chunk is served, its answer cut
    client = rig.client()
    lc = rig.lifecycle(client)
    await lc.start()
    await rig.tick_until(lc, lambda: rig.run_status(run) in ENDED_RUN, within=30)
    assert rig.run_status(run) == "succeeded"
    assert rig.output(run) == f"from the bundle\n{3 * CHUNK_BYTES}\n".encode()
    asked = [c.body.index for c in client.named("bundle-chunks") if isinstance(c.body, BundleChunkRequest)]
    assert asked[:2] == [0, 0] and sorted(asked) == [0, 0, 1, 2, 3], asked  # chunk 0 twice, every other once
    assert os.listdir(rig.work_dir / "bundles") == [digest]


async def test_only_the_lease_holder_gets_a_chunk(rig: Rig, tmp_path: Path) -> None:
    digest = store(rig, scripts(tmp_path, 100))
    rig.add_run({"argv": ["sleep", "60"], "bundle": digest})
    client = rig.client()
    session = await client.open_session(capacity=1, generation=1)
    offered = await client.pull(session, str(uuid.uuid4()))
    assert offered.status == "offered"
    o = offered.offer

    def ask(token: str) -> BundleChunkRequest:
        return BundleChunkRequest(worker_generation=1, project_id=o.project_id, run_id=o.run_id,
                                  attempt_id=o.attempt_id, lease_generation=o.lease_generation, lease_token=token,
                                  digest=digest, index=0)  # fmt: skip

    good = await client.bundle_chunk(session, o.offer_id, ask(offered.lease_token))
    assert good.digest == digest and good.chunk_count == 1
    again = await client.bundle_chunk(session, o.offer_id, ask(offered.lease_token))
    assert again == good, "a fetch repeated after a lost answer gets the same bytes"
    with pytest.raises(Refused) as stale:
        await client.bundle_chunk(
            session, o.offer_id, ask(base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode())
        )
    assert stale.value.status == 409 and stale.value.code.startswith("fenced.")
    rig.conn.execute("update ql.run_leases set expires_at_ms = ql.now_ms() - 1 where attempt_id = %s", (o.attempt_id,))
    with pytest.raises(Refused) as expired:
        await client.bundle_chunk(session, o.offer_id, ask(offered.lease_token))
    assert expired.value.code == "fenced.lease_expired"


async def test_a_fetch_past_the_limit_is_a_start_failure_and_spawns_nothing(rig: Rig, tmp_path: Path) -> None:
    digest = store(rig, scripts(tmp_path, 2 * CHUNK_BYTES))
    marker = tmp_path / "spawned"
    run = rig.add_run({"argv": ["touch", str(marker)], "bundle": digest})
    rig.served.lose["bundle-chunks"] = 1000  # every answer cut: the fetch never ends
    lc = rig.lifecycle(bundles=BundleCache(rig.work_dir / "bundles", 1 << 30, fetch_limit_s=1.0))
    await lc.start()
    await rig.tick_until(lc, lambda: rig.run_status(run) in ENDED_RUN, within=30)
    assert [(a["status"], a["error_code"]) for a in rig.attempts(run)] == [("failed", "bundle.fetch_timeout")]
    assert not marker.exists()
