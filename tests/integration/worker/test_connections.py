"""The Worker's one HTTPS authority (docs/architecture.md §7, decision 0000 (ADR-0112 §2)): one keep-alive TLS
connection carries a whole lifecycle, seen both by the client and, independently, by the server; replacing the
credential files opens a new connection on the next call and closes the old one.
Touches: a fresh database, the in-process shell on TLS 1.3 loopback (observed by a middleware), the test's
credential copies (replaced mid-test by a certificate issued from the session PKI's CA), real task processes.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from qinglong.cli import pki as pki_cli
from qinglong.wire import WorkerSessionAlive
from tests.integration.worker.conftest import ENDED_RUN, Rig, poll

pytestmark = pytest.mark.db

WHOLE_LIFECYCLE = {"open", "heartbeat", "pull", "starting", "lease-control", "output", "completion"}


def _der_sha256(pem: Path) -> str:
    return hashlib.sha256(x509.load_pem_x509_certificate(pem.read_bytes()).public_bytes(Encoding.DER)).hexdigest()


def _replace(target: Path, source: Path) -> None:
    """Swap a credential file atomically (as a rotation tool would)."""
    tmp = target.with_name(target.name + ".new")
    tmp.write_bytes(source.read_bytes())
    tmp.chmod(0o600)
    os.replace(tmp, target)


async def test_one_tcp_connection_carries_a_whole_lifecycle(rig: Rig) -> None:
    rig.set_lease_ttl(3000)
    run = rig.add_run({"argv": ["sh", "-c", "sleep 1; echo done"], "timeoutMs": 60000})
    client = rig.client()
    lc = rig.lifecycle(client)
    await lc.start()
    await rig.tick_until(lc, lambda: rig.run_status(run) in ENDED_RUN, every=0.2)
    await lc.tick()  # and one more pull, on the same connection
    assert rig.run_status(run) == "succeeded"

    kinds = rig.served.kinds()
    assert set(kinds) >= WHOLE_LIFECYCLE, kinds
    assert kinds.count("lease-control") >= 2 and kinds.count("starting") == 2, kinds  # renewals; ACK + replay
    assert client.connections_opened == 1
    # Independently, on the server: one client port and one transport for every request.
    assert len(rig.served.ports()) == 1, rig.served.ports()
    assert len({id(s.transport) for s in rig.served.seen}) == 1

    transport = rig.served.seen[0].transport
    assert not transport.is_closing()
    await lc.stop()
    await poll(transport.is_closing, within=5)  # stop() closes the one socket


async def test_replacing_the_credential_files_opens_a_new_connection_and_closes_the_old(rig: Rig) -> None:
    client = rig.client()
    lc = rig.lifecycle(client)
    await lc.start()
    await lc.tick()
    assert client.connections_opened == 1
    [old_port] = rig.served.ports()
    old_transport = rig.served.seen[0].transport
    old_cert = _der_sha256(rig.creds.certificate)
    assert {s.peer_cert_sha256 for s in rig.served.seen} == {old_cert}

    # A new certificate and key for the same Worker, from the same CA, swapped in between two calls.
    issued = pki_cli.issue_worker(rig.pki.ca.parent, rig.worker_id, name=f"rotated-{uuid.uuid4().hex[:8]}")
    _replace(rig.creds.certificate, issued.certificate)
    _replace(rig.creds.key, issued.key)
    new_cert = issued.fingerprint.hex()
    assert new_cert != old_cert

    rotated_at = len(rig.served.seen)
    await lc.tick()
    heartbeat = client.named("heartbeat")[-1]
    assert isinstance(heartbeat.result, WorkerSessionAlive), heartbeat.error
    assert client.connections_opened == 2
    [new_port] = rig.served.ports(rotated_at)
    assert new_port != old_port and rig.served.ports() == [old_port, new_port]
    assert {s.peer_cert_sha256 for s in rig.served.seen[rotated_at:]} == {new_cert}
    await poll(old_transport.is_closing, within=5)  # the old socket is closed

    # The new connection carries the protocol from here on, and stays the only one.
    run = rig.add_run({"argv": ["sh", "-c", "echo after rotation"]})
    await rig.tick_until(lc, lambda: rig.run_status(run) in ENDED_RUN)
    assert rig.run_status(run) == "succeeded"
    assert client.connections_opened == 2
    assert rig.served.ports(rotated_at) == [new_port]
