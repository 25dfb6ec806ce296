"""`qinglong pki`: a private PKI for one deployment, made with `cryptography`: a CA, the shell's
server certificate and one client certificate per Worker (SAN URI urn:qinglong:worker:<uuid>).
ECDSA P-256 keys (an RSA-2048 signature costs about 15 times more per handshake, docs/architecture.md §12).
Touches only the folder it is given: files written 0600 (keys) or 0644 (certificates).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from qinglong.wire.common import WORKER_URI_PREFIX

VALIDITY = dt.timedelta(days=397)


@dataclass(frozen=True)
class Issued:
    certificate: Path
    key: Path
    fingerprint: bytes  # SHA-256 of the certificate's DER: what ql.workers.cert_fingerprint holds
    not_after_ms: int  # when it expires (ms since the epoch): what ql.workers.cert_not_after_ms holds


def _write(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, mode)


def _save(folder: Path, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> Issued:
    folder.mkdir(parents=True, exist_ok=True)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    _write(folder / f"{name}.key", key_pem, 0o600)
    _write(folder / f"{name}.crt", cert.public_bytes(serialization.Encoding.PEM), 0o644)
    der = cert.public_bytes(serialization.Encoding.DER)
    not_after_ms = int(cert.not_valid_after_utc.timestamp() * 1000)
    return Issued(folder / f"{name}.crt", folder / f"{name}.key", hashlib.sha256(der).digest(), not_after_ms)


def _builder(
    subject: str,
    issuer: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    days: dt.timedelta,
    issuer_key: ec.EllipticCurvePublicKey,
) -> x509.CertificateBuilder:
    """Key identifiers on every certificate: while a CA is rotated, the old and the new one are trusted side by
    side, and a verifier picks a certificate's issuer by them (besides the CA's own name)."""
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + days)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key), critical=False)
    )


def _load(folder: Path, name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert = x509.load_pem_x509_certificate((folder / f"{name}.crt").read_bytes())
    key = serialization.load_pem_private_key((folder / f"{name}.key").read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{name}.key is not an EC key")
    return cert, key


def init_ca(folder: Path, name: str = "ca") -> Issued:
    """A self-signed CA (pathlen 0) in folder/ca.crt and folder/ca.key, named by the day it was made and a
    random suffix, so that two CAs trusted side by side during a rotation never share a name."""
    key = ec.generate_private_key(ec.SECP256R1())
    common_name = f"Qinglong deployment CA {dt.datetime.now(dt.UTC):%Y-%m-%d} {os.urandom(4).hex()}"
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        _builder(common_name, subject, key, dt.timedelta(days=3650), key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(key, hashes.SHA256())
    )
    return _save(folder, name, cert, key)


def issue_server(folder: Path, hosts: list[str], *, ca: str = "ca", name: str = "server") -> Issued:
    """The shell's TLS server certificate for `hosts` (DNS names or IP addresses)."""
    ca_cert, ca_key = _load(folder, ca)
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    cert = (
        _builder(hosts[0], ca_cert.subject, key, VALIDITY, ca_key.public_key())
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    return _save(folder, name, cert, key)


def issue_worker(folder: Path, worker_id: str, *, ca: str = "ca", name: str | None = None) -> Issued:
    """A Worker's client certificate whose SAN URI is urn:qinglong:worker:<worker_id>."""
    ca_cert, ca_key = _load(folder, ca)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        _builder(f"qinglong worker {worker_id}", ca_cert.subject, key, VALIDITY, ca_key.public_key())
        .add_extension(
            x509.SubjectAlternativeName([x509.UniformResourceIdentifier(WORKER_URI_PREFIX + worker_id)]),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    return _save(folder, name or f"worker-{worker_id}", cert, key)
