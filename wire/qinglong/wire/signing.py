"""Plan signatures: an operator's Ed25519 key signs a task revision's plan. Touches nothing but key files it is named.

Whoever can write one row of the task revisions could otherwise make every Worker of a pool run any command. The
operator's CLI signs each plan it creates with an operator key (`sign`); the Worker holds the public keys it trusts
(`load_trusted`) and refuses, before anything is spawned, a plan whose signature does not verify (`verify`, which
raises `PlanRefused` with a stable code). The signed bytes (`signing_message`) bind the Project, so a signed plan
copied into another Project's task (where it would get that Project's secrets) does not verify, and cover every
key of the plan in one canonical JSON form, so the key order of the stored object does not matter.

Key files (`qinglong pki plan-key new`): `ops.key` holds the private key (PEM PKCS8, unencrypted, mode 0600) and
`ops.pub` beside it the public key (PEM SubjectPublicKeyInfo, mode 0644); a key file name not ending in `.key` gets
`.pub` appended. A key is named by its key id: the first 16 hex characters of SHA-256 of the raw 32-byte public key.
Loaders refuse with a one-line ValueError naming the file (never a key's bytes): a missing, unreadable, malformed
or wrong-type file, a private key that group or others may read, a public key that group or others may change.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from qinglong.wire.fields import Uuid
from qinglong.wire.offer import Plan, PlanSignature

MESSAGE_PREFIX: Final = b"qinglong-plan-v1\n"
PRIVATE_SUFFIX: Final = ".key"
PUBLIC_SUFFIX: Final = ".pub"
KEY_FILE_MAX_BYTES: Final = 16 * 1024  # an Ed25519 PEM file is about 120 bytes

_PEM: Final = serialization.Encoding.PEM

PLAN_UNSIGNED: Final = "plan.unsigned"
PLAN_SIGNER_UNKNOWN: Final = "plan.signer_unknown"
PLAN_SIGNATURE_INVALID: Final = "plan.signature_invalid"
PLAN_CODES: Final[tuple[str, ...]] = (PLAN_UNSIGNED, PLAN_SIGNER_UNKNOWN, PLAN_SIGNATURE_INVALID)


class PlanRefused(Exception):
    """A plan the Worker must not spawn. `code` is one of PLAN_CODES; `message` names the key id at most."""

    code: str
    message: str

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


# -- signing and verifying ---------------------------------------------------------------------------------------


def canonical_json(obj: object) -> bytes:
    """Sorted keys at every depth, no whitespace, UTF-8 (not \\u escapes), no NaN: one text per JSON value."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def signing_message(project_id: str, plan: Plan) -> bytes:
    """The exact bytes signed: the prefix, the Project's id (lower-case UUID text), a newline, the plan's canonical
    JSON. Raises WireError (wire.bad_uuid) for a project id that is not a lower-case UUID."""
    project = Uuid().check(project_id, "projectId")
    return MESSAGE_PREFIX + project.encode("ascii") + b"\n" + canonical_json(plan.to_obj())


def key_id(public: Ed25519PublicKey) -> str:
    """The key's name: the first 16 hex characters of SHA-256 of its raw 32 bytes."""
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def sign(private: Ed25519PrivateKey, project_id: str, plan: Plan) -> PlanSignature:
    """Sign `plan` for the Project `project_id` (done on the operator's machine, when the revision is created)."""
    return PlanSignature(key_id=key_id(private.public_key()), signature=private.sign(signing_message(project_id, plan)))


def verify(
    trusted: Mapping[str, Ed25519PublicKey], project_id: str, plan: Plan, signature: PlanSignature | None
) -> None:
    """Return if a trusted key signed exactly this plan for this Project; else raise PlanRefused:
    plan.unsigned (no signature), plan.signer_unknown (its key id is not trusted), plan.signature_invalid (the plan
    or the Project changed after signing, or the signature is forged)."""
    if signature is None:
        raise PlanRefused(PLAN_UNSIGNED, "the plan carries no signature")
    public = trusted.get(signature.key_id)
    if public is None:
        raise PlanRefused(PLAN_SIGNER_UNKNOWN, f"key {signature.key_id} is not a trusted plan key")
    try:
        public.verify(signature.signature, signing_message(project_id, plan))
    except InvalidSignature:
        raise PlanRefused(
            PLAN_SIGNATURE_INVALID, f"the signature by key {signature.key_id} does not match this plan and Project"
        ) from None


# -- key files ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyFiles:
    """A key pair written by write_private_key."""

    private: Path
    public: Path
    key_id: str


def public_key_path(private: Path) -> Path:
    """Where the public key of a private key file goes: ops.key → ops.pub; any other name gets .pub appended."""
    if private.suffix == PRIVATE_SUFFIX:
        return private.with_suffix(PUBLIC_SUFFIX)
    return private.with_name(private.name + PUBLIC_SUFFIX)


def _create(path: Path, mode: int) -> int:
    """A new file (never an existing one, never through a symlink), exactly `mode` whatever the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    os.fchmod(fd, mode)
    return fd


def _fill(f: BinaryIO, data: bytes) -> None:
    f.write(data)
    f.flush()
    os.fsync(f.fileno())


def write_private_key(path: Path) -> KeyFiles:
    """Make an Ed25519 key: `path` (PEM PKCS8, unencrypted, 0600) and public_key_path(path) (PEM
    SubjectPublicKeyInfo, 0644), both created exclusively. FileExistsError (its `filename` the file that exists)
    if either exists, and then nothing is written; ValueError for a private key path ending in .pub."""
    if path.suffix == PUBLIC_SUFFIX:
        raise ValueError(f"{path}: a private key file's name must not end in {PUBLIC_SUFFIX}")
    public_path = public_key_path(path)
    for existing in (path, public_path):  # both checked first, so a refusal leaves no new file behind
        if os.path.lexists(existing):
            raise FileExistsError(errno.EEXIST, "a key file is never overwritten", str(existing))
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(_PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    public_pem = key.public_key().public_bytes(_PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    private_fd = _create(path, 0o600)
    try:
        public_fd = _create(public_path, 0o644)
    except BaseException:
        os.close(private_fd)
        path.unlink()
        raise
    written = False
    try:
        with os.fdopen(private_fd, "wb") as private_file, os.fdopen(public_fd, "wb") as public_file:
            _fill(private_file, private_pem)
            _fill(public_file, public_pem)
        written = True
    finally:
        if not written:
            path.unlink(missing_ok=True)
            public_path.unlink(missing_ok=True)
    return KeyFiles(path, public_path, key_id(key.public_key()))


def _read(path: Path, *, private: bool) -> bytes:
    """The file's bytes, after the mode checks (made on the opened file, so a swap in between changes nothing)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ValueError(f"{path}: no such key file") from None
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the key file: {exc.strerror or type(exc).__name__}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path}: not a regular file")
        mode = stat.S_IMODE(st.st_mode)
        if private and mode & 0o077:
            raise ValueError(f"{path}: a private key others may read (mode {mode:04o}): chmod 600 it")
        if not private and mode & 0o022:
            raise ValueError(f"{path}: a public key others may change (mode {mode:04o}): chmod go-w it")
        chunks: list[bytes] = []
        size = 0
        while size <= KEY_FILE_MAX_BYTES and (chunk := os.read(fd, KEY_FILE_MAX_BYTES + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the key file: {exc.strerror or type(exc).__name__}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > KEY_FILE_MAX_BYTES:
        raise ValueError(f"{path}: not a PEM key file (larger than {KEY_FILE_MAX_BYTES} bytes)")
    return data


def _kind(key: object) -> str:
    name = type(key).__name__
    return name.removesuffix("PrivateKey").removesuffix("PublicKey") or name


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """The Ed25519 private key in `path` (PEM PKCS8, unencrypted, mode 0600 or stricter)."""
    data = _read(path, private=True)
    if b"-----BEGIN PUBLIC KEY-----" in data:
        raise ValueError(f"{path}: holds a public key, not a private key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:  # cryptography's word for a key that needs a password
        raise ValueError(f"{path}: an encrypted private key (plan keys are unencrypted PEM PKCS8)") from None
    except (ValueError, UnsupportedAlgorithm):
        raise ValueError(f"{path}: not a PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path}: holds a key of type {_kind(key)}, not an Ed25519 key")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    """The Ed25519 public key in `path` (PEM SubjectPublicKeyInfo, not writable by group or others)."""
    data = _read(path, private=False)
    if b"PRIVATE KEY-----" in data:
        raise ValueError(f"{path}: holds a private key, not a public key (a Worker trusts the .pub file)")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm):
        raise ValueError(f"{path}: not a PEM public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError(f"{path}: holds a key of type {_kind(key)}, not an Ed25519 key")
    return key


def load_trusted(paths: Sequence[Path]) -> dict[str, Ed25519PublicKey]:
    """The public keys a Worker trusts, by key id, from its .pub files. ValueError (one line, naming the file) for a
    bad file or a key listed twice. No paths: an empty mapping (whether that is allowed is the caller's choice)."""
    trusted: dict[str, Ed25519PublicKey] = {}
    where: dict[str, Path] = {}
    for path in paths:
        public = load_public_key(path)
        kid = key_id(public)
        if kid in trusted:
            raise ValueError(f"{path}: key {kid} is already trusted (from {where[kid]})")
        trusted[kid] = public
        where[kid] = path
    return trusted
