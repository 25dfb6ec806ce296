"""TLS 1.3-only server contexts for the shell's two listeners, and the worker identity a verified
client certificate carries. Touches the certificate and key files it is given (read only)."""

from __future__ import annotations

import hashlib
import re
import ssl
from pathlib import Path
from typing import Final

from qinglong.wire.common import WORKER_URI_PREFIX
from qinglong.wire.specs import UUID_PATTERN

WORKER_URI: Final = re.compile(f"{re.escape(WORKER_URI_PREFIX)}({UUID_PATTERN})")


def server_context(cert: Path, key: Path, *, client_ca: Path | None = None) -> ssl.SSLContext:
    """TLS 1.3 only; with `client_ca`, a client certificate signed by it is required at the handshake."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_cert_chain(cert, key)
    if client_ca is not None:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(cafile=client_ca)
    return ctx


def worker_identity(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> tuple[str, bytes] | None:
    """(worker id from the SAN URI urn:qinglong:worker:<uuid>, SHA-256 of the certificate DER), or
    None when the peer presented no verified certificate or no single worker URI."""
    if ssl_object is None:
        return None
    peer = ssl_object.getpeercert()
    der = ssl_object.getpeercert(binary_form=True)
    if not peer or der is None:
        return None
    uris = [entry[1] for entry in peer.get("subjectAltName", ()) if len(entry) == 2 and entry[0] == "URI"]
    ids = [m[1] for uri in uris if (m := WORKER_URI.fullmatch(str(uri)))]
    if len(ids) != 1:
        return None
    return ids[0], hashlib.sha256(der).digest()
