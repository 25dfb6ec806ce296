"""Rolling rotation of every credential under a live Worker (docs/decisions/0012-credential-rotation.md,
docs/operations.md "Secret rotation"): `qinglong shell serve` as its own process and a `qinglong-worker run`
process holding one running task while, in turn,

1. the cluster secret rotates in three SIGHUP reloads (the new secret accepted; then current, the old one
   accepted: the Worker is told to re-key and opens a new session; then the old one dropped);
2. the shell's server certificate is replaced by one from a new CA, with the client CA bundle and the Worker's
   trust anchors holding both CAs (a reload; a fresh handshake then gets the new certificate);
3. the Worker's certificate is renewed with `qinglong worker renew` (same generation) and installed one file at
   a time under the running Worker; a later session open proves the Worker presents the new certificate.

Not one Worker call fails: the shell answered every worker-ingress request 2xx, the Worker logged no refusal,
transport failure or protocol error, the task ran on in its one Attempt (its Lease renewed in every phase)
and ends succeeded when told to. Touches: a fresh database, tmp_path (configuration, PKI copies, credentials,
journal, work folder), loopback ports, child processes (the shell, the Worker, the CLI, the task).
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import shutil
import signal
import socket
import ssl
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509

from qinglong.cli import pki as pki_cli
from tests.integration.cli.test_cli import acli
from tests.integration.shell.conftest import Pki
from tests.integration.shell.conftest import pki as pki  # fixtures reused here
from tests.integration.worker.conftest import Rig, poll
from tests.integration.worker.conftest import rig as rig
from tests.support.env import free_port

pytestmark = pytest.mark.db

SERVE = (sys.executable, "-m", "qinglong.cli", "shell", "serve", "--config")
WORKER_FAILURES = ("call.refused", "call.transport_failed", "call.protocol_error", "worker.refused")


def _secret(path: Path) -> Path:
    path.write_bytes(os.urandom(32).hex().encode())
    path.chmod(0o600)
    return path


def _replace(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace a file's content in one rename, as an operator's deployment tool would."""
    new = path.with_name(path.name + ".new")
    new.write_bytes(data)
    new.chmod(mode)
    new.rename(path)


def _shell_toml(folder: Path, dsn: str, ports: tuple[int, int, int], accepted: str | None) -> None:
    """shell.toml over `folder`'s files: cluster.secret current, `accepted` (a file name there) also verified."""
    also = "" if accepted is None else f'accepted_secret_file = "{accepted}"\n'
    f = folder
    (folder / "shell.toml").write_text(
        f'[database]\ndsn = "{dsn}"\n\n[secret]\ncluster_secret_file = "cluster.secret"\n{also}\n'
        f'[worker_listener]\nhost = "127.0.0.1"\nport = {ports[0]}\ncertificate = "{f}/server.crt"\n'
        f'key = "{f}/server.key"\nclient_ca = "{f}/client-ca.crt"\n\n'
        f'[user_listener]\nhost = "127.0.0.1"\nport = {ports[1]}\ncertificate = "{f}/server.crt"\n'
        f'key = "{f}/server.key"\n\n[admin_listener]\nhost = "127.0.0.1"\nport = {ports[2]}\n'
    )


@dataclass
class RunningShell:
    proc: asyncio.subprocess.Process
    folder: Path  # shell.toml, cluster.secret, server.crt/.key, client-ca.crt
    dsn: str
    ports: tuple[int, int, int]  # worker, user, admin
    log: Path

    def write(self, *, accepted: str | None) -> None:
        _shell_toml(self.folder, self.dsn, self.ports, accepted)

    async def reload(self) -> None:
        """SIGHUP, then wait for the shell's log line saying the reload took effect."""
        before = self.reloads()
        self.proc.send_signal(signal.SIGHUP)
        await poll(lambda: self.reloads() > before, within=10)

    def reloads(self) -> int:
        text = self.log.read_text()
        assert "shell.reload_failed" not in text, text
        return text.count("shell.reloaded")

    async def metrics(self) -> str:
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{self.ports[2]}/metrics") as resp:
            assert resp.status == 200
            return await resp.text()

    async def failed_worker_answers(self) -> dict[str, float]:
        """Worker-ingress answers by route and status that were not 2xx (from the shell's /metrics)."""
        text = await self.metrics()
        found = re.findall(r'^qinglong_shell_requests_total\{route="(worker[^"]*)",status="(\d+)"\} (\S+)$', text, re.M)
        assert any(route == "worker.lease_control" for route, _, _ in found), text
        return {f"{route} {status}": float(n) for route, status, n in found if not status.startswith("2")}

    async def verified(self, key: str) -> float:
        """Worker requests verified under the current or the accepted secret (the shell's /metrics)."""
        pattern = rf'^qinglong_shell_ql3w_verified_total\{{key="{key}"\}} (\S+)$'
        found = re.search(pattern, await self.metrics(), re.M)
        return 0.0 if found is None else float(found[1])


def gauge(metrics: str, name: str) -> float | None:
    found = re.search(rf"^{name} (\S+)$", metrics, re.M)
    return None if found is None else float(found[1])


def _logged(log: Path, event: str, times: int) -> bool:
    return log.read_text().count(event) == times


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
async def shell(rig: Rig, pki: Pki, tmp_path: Path) -> AsyncIterator[RunningShell]:
    """`qinglong shell serve` over copies of the test PKI's server certificate, key and CA, with a fresh secret."""
    folder = tmp_path / "shell"
    folder.mkdir()
    shutil.copyfile(pki.server.certificate, folder / "server.crt")
    shutil.copyfile(pki.server.key, folder / "server.key")
    shutil.copyfile(pki.ca, folder / "client-ca.crt")
    _secret(folder / "cluster.secret")
    ports = (free_port(), free_port(), free_port())
    _shell_toml(folder, rig.database.runtime_dsn, ports, None)
    log = tmp_path / "shell.log"
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(*SERVE, str(folder / "shell.toml"), stderr=out)
    running = RunningShell(proc, folder, rig.database.runtime_dsn, ports, log)
    try:
        await poll(lambda: _listening(ports[2]), within=20)  # the admin listener binds last
        yield running
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 30)


def _served_certificate(port: int, pki: Pki, trust: Path) -> bytes:
    """The DER of the certificate a fresh TLS 1.3 handshake to the worker port gets (presenting Worker A's)."""
    ctx = ssl.create_default_context(cafile=str(trust))
    ctx.load_cert_chain(pki.worker_a.certificate, pki.worker_a.key)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


async def test_every_credential_rotates_under_a_live_worker_without_one_failed_call(
    rig: Rig, shell: RunningShell, pki: Pki, tmp_path: Path
) -> None:
    rig.set_lease_ttl(4000)
    stop = tmp_path / "stop"
    run = rig.add_run({"argv": ["sh", "-c", f"while [ ! -e {stop} ]; do sleep 0.1; done; echo done"]})
    config = rig.write_config(tick_seconds=0.2)
    config.write_text(re.sub(r'^origin = ".*"$', f'origin = "https://127.0.0.1:{shell.ports[0]}"',
                             config.read_text(), flags=re.M))  # fmt: skip
    worker = rig.start_worker_process(config)
    await poll(lambda: rig.run_status(run) == "running", within=30)

    def session() -> str:
        return str(
            rig.one("select id from ql.worker_sessions where worker_id = %s and status = 'live'", (rig.worker_id,))
        )

    async def renews(what: str) -> None:
        version = rig.lease_version(run)
        await poll(lambda: rig.lease_version(run) >= version + 2, within=20)
        assert rig.run_status(run) == "running", what

    await renews("before any rotation")
    first_session = session()

    # 1. The cluster secret: the new one accepted first, then current (the old one accepted), then alone.
    folder = shell.folder
    new_secret = _secret(folder / "next.secret").read_bytes()
    shell.write(accepted="next.secret")
    await shell.reload()
    await renews("with the next secret accepted")
    assert session() == first_session, "a secret that is only accepted re-keys nobody"
    shutil.copyfile(folder / "cluster.secret", folder / "previous.secret")
    (folder / "previous.secret").chmod(0o600)
    _replace(folder / "cluster.secret", new_secret, 0o600)
    shell.write(accepted="previous.secret")
    await shell.reload()
    await poll(lambda: session() != first_session and "worker.rekeyed" in worker.output(), within=20)
    await renews("after the re-key")
    accepted_before = await shell.verified("accepted")
    assert accepted_before >= 1, "the Worker was told to re-key by an answer to a request the old secret signed"
    shell.write(accepted=None)
    await shell.reload()
    await renews("with the old secret gone")
    assert await shell.verified("accepted") == accepted_before, "nothing was signed with the old secret since"

    # 2. The server certificate from a new CA: both CAs trusted by the shell and the Worker first.
    new_ca_dir = tmp_path / "ca2"
    new_ca = pki_cli.init_ca(new_ca_dir)
    both = pki.ca.read_bytes() + new_ca.certificate.read_bytes()
    bundle = tmp_path / "both-cas.crt"
    bundle.write_bytes(both)
    _replace(rig.creds.trust_anchors, both)
    _replace(folder / "client-ca.crt", both)
    new_server = pki_cli.issue_server(new_ca_dir, ["127.0.0.1"])
    _replace(folder / "server.key", new_server.key.read_bytes(), 0o600)
    _replace(folder / "server.crt", new_server.certificate.read_bytes())
    await shell.reload()
    served = _served_certificate(shell.ports[0], pki, bundle)
    assert served == ssl.PEM_cert_to_DER_cert(new_server.certificate.read_text()), "a new handshake gets the new one"
    await renews("after the server certificate and CA bundle changed")

    # 3. The Worker's certificate, renewed at the same generation and installed file by file.
    ca_dir = tmp_path / "ca1"
    ca_dir.mkdir()
    for name in ("ca.crt", "ca.key"):
        shutil.copyfile(pki.ca.parent / name, ca_dir / name)
    assert gauge(await shell.metrics(), "qinglong_worker_certificates_unrecorded") == 1, "worker-a: no expiry recorded"
    renewed = await acli("worker", "renew", "--dsn", rig.database.dsn(), "--pki", str(ca_dir), "worker-a")
    assert (renewed.code, renewed.stdout, renewed.stderr) == (0, f"{rig.worker_id}\n", ""), renewed
    new_cert = ca_dir / f"worker-{rig.worker_id}.crt"
    expires = x509.load_pem_x509_certificate(new_cert.read_bytes()).not_valid_after_utc.timestamp()
    metrics = await shell.metrics()
    assert gauge(metrics, "qinglong_worker_certificates_earliest_expiry_timestamp_seconds") == expires, metrics
    assert gauge(metrics, "qinglong_worker_certificates_unrecorded") == 0
    _replace(rig.creds.certificate, new_cert.read_bytes())  # the certificate first: it does not fit the old key
    await renews("between the certificate and its key")
    assert "credentials.unusable" in worker.output(), "the Worker went on with its open connection meanwhile"
    _replace(rig.creds.key, (ca_dir / f"worker-{rig.worker_id}.key").read_bytes(), 0o600)
    await renews("with the renewed certificate installed")
    assert rig.one("select generation from ql.workers where id = %s", (rig.worker_id,)) == 1
    # Only the renewed certificate is accepted from now on: a session open (forced by one more secret rotation)
    # succeeds only if the Worker presents it.
    rig.conn.execute("update ql.workers set previous_cert_fingerprint = null where id = %s", (rig.worker_id,))
    rekeyed = session()
    shutil.copyfile(folder / "cluster.secret", folder / "previous.secret")
    _replace(folder / "cluster.secret", os.urandom(32).hex().encode(), 0o600)
    shell.write(accepted="previous.secret")
    await shell.reload()
    await poll(lambda: session() != rekeyed, within=20)
    await renews("after a session opened with the renewed certificate")

    stop.touch()
    await poll(lambda: rig.run_status(run) == "succeeded", within=30)
    assert [a["status"] for a in rig.attempts(run)] == ["succeeded"], "one Attempt: the task never stopped"
    assert await shell.failed_worker_answers() == {}, "every worker-ingress call was answered 2xx"
    log = worker.output()
    assert not [line for line in log.splitlines() if any(f in line for f in WORKER_FAILURES)], log


async def test_a_reload_that_cannot_apply_everything_applies_nothing(rig: Rig, shell: RunningShell, pki: Pki) -> None:
    """A reload with an unreadable accepted secret or a key that does not fit the certificate is logged and changes
    nothing: handshakes still get the old certificate. A change that needs a restart is named and not applied."""
    folder = shell.folder
    old_certificate = (folder / "server.crt").read_bytes()
    before = _served_certificate(shell.ports[0], pki, pki.ca)
    for failures, broken in enumerate(("missing", "mismatched key"), start=1):
        if broken == "missing":
            shell.write(accepted="no-such.secret")
        else:
            shell.write(accepted=None)
            _replace(folder / "server.crt", pki.worker_b.certificate.read_bytes())  # not the server key's pair
        shell.proc.send_signal(signal.SIGHUP)
        await poll(functools.partial(_logged, shell.log, "shell.reload_failed", failures), within=10)
        assert _served_certificate(shell.ports[0], pki, pki.ca) == before, broken
    last = shell.log.read_text().splitlines()[-1]
    assert "key values mismatch" in last.lower() or "KEY_VALUES_MISMATCH" in last, last
    assert "no-such.secret" in shell.log.read_text()

    _replace(folder / "server.crt", old_certificate)
    (folder / "shell.toml").write_text((folder / "shell.toml").read_text().replace('dsn = "', 'pool_size = 2\ndsn = "'))
    shell.proc.send_signal(signal.SIGHUP)
    await poll(lambda: "shell.reloaded" in shell.log.read_text(), within=10)
    reloaded = [line for line in shell.log.read_text().splitlines() if "shell.reloaded" in line]
    assert '"restart_needed_for": "pool_size"' in reloaded[-1], reloaded
