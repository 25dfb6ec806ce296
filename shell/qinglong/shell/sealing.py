"""Envelope encryption of Project secret values: the shell seals a value before PostgreSQL stores it and
opens it after PostgreSQL returns it. Touches only the key file it is pointed at (read only).

    data key   = 32 fresh random bytes per value (os.urandom)
    ciphertext = AES-256-GCM(data key, nonce, value, "qinglong-secret/v1\\0" + binding)
    wrapped    = wrap nonce ‖ AES-256-GCM(KEK, wrap nonce, data key, "qinglong-dek/v1\\0" + kek id + "\\0" + binding)
    binding    = project_id + "\\0" + name + "\\0" + version_id
    kek id     = base64url(HMAC-SHA256(KEK, "qinglong-kek-id")[:9])   (12 characters)

Threat model, in brief. The database holds only the value ciphertexts, their nonces, the wrapped data keys
and the KEK ids (text, bytea, bytea, bytea): a dump, a replica or a backup of it reveals no secret value.
The key-encryption key (KEK) lives in a key file on the shell host (64 hexadecimal characters, mode 0600,
like the ql3w cluster secret) and never leaves that host's memory; the kek id names it and reveals nothing
of it. The associated data binds each ciphertext and each wrapped key to its project, name and version
(and the wrapped key to its kek id), so a row copied to another project, name or version, or relabelled
with another kek id, fails to open rather than decrypting in the wrong place. AES-256-GCM nonces are random
96-bit values per key: a data key encrypts one value once, so no nonce can repeat under it; each wrapping
under a KEK takes a fresh random nonce, well within NIST SP 800-38D's 2^32 random-nonce encryptions per
key. A failure to open names only its reason ("unknown_kek" or "tampered"), never key or value bytes.

Rotation, rolling: give every shell the new KEK as current with the old one accepted (SIGHUP reloads
a Sealer in place), rewrap every row whose kek id is not the current one (`Sealer.rewrap`: the data key
is unwrapped and wrapped again, the value is never decrypted), then drop the old KEK.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from qinglong.wire.ql3w import KEY_ID, b64url
from qinglong.wire.specs import UUID_TEXT

VALUE_MAX_BYTES: Final = 64 * 1024
KEK_BYTES: Final = 32
NONCE_BYTES: Final = 12
TAG_BYTES: Final = 16
WRAPPED_KEY_BYTES: Final = NONCE_BYTES + KEK_BYTES + TAG_BYTES  # the data key is as long as a KEK

Reason = Literal["unknown_kek", "tampered"]
UNKNOWN_KEK: Final[Reason] = "unknown_kek"
TAMPERED: Final[Reason] = "tampered"

NAME: Final = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")  # an environment-variable name (fullmatch)
_KEK_TEXT = re.compile(rb"[0-9A-Fa-f]{64}")
_KEK_FILE_MAX = 4096  # a key file is 64 characters and some whitespace; read no more than this


class KekFileError(ValueError):
    """A one-line reason a key file cannot be used (it names the file, never its content)."""


class Unsealable(Exception):
    """A sealed value that cannot be opened; `reason` is stable: "unknown_kek" or "tampered"."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason: Reason = reason


@dataclass(frozen=True, slots=True)
class Sealed:
    """One sealed value, stored as-is (text, bytea, bytea, bytea)."""

    kek_id: str
    wrapped_key: bytes  # 12-byte nonce ‖ AES-256-GCM ciphertext + tag of the 32-byte data key
    nonce: bytes  # 12 bytes
    ciphertext: bytes  # AES-256-GCM ciphertext + tag of the value


def kek_id(kek: bytes) -> str:
    """The public name of a KEK: it reveals nothing of the key, and two keys share it with probability 2^-72."""
    return b64url(hmac.new(kek, b"qinglong-kek-id", hashlib.sha256).digest()[:9])


def new_kek() -> str:
    """The text of a new key file: 32 fresh random bytes in hexadecimal and a newline (write it mode 0600)."""
    return os.urandom(KEK_BYTES).hex() + "\n"


def read_kek(path: Path) -> bytes:
    """The 32-byte KEK a key file holds (64 hexadecimal characters, then optional whitespace); KekFileError
    when the file cannot be read, is readable or writable by group or others, or holds anything else."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # O_NONBLOCK: a FIFO never hangs
        try:
            mode = os.fstat(descriptor).st_mode
            text = _read_some(descriptor) if stat.S_ISREG(mode) else b""
        finally:
            os.close(descriptor)
    except OSError as exc:
        raise KekFileError(f"cannot read the key-encryption key {path}: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        raise KekFileError(f"the key-encryption key {path} is not a regular file")
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KekFileError(f"{path} must not be readable or writable by group or others (chmod 600)")
    if len(text) > _KEK_FILE_MAX or _KEK_TEXT.fullmatch(text.rstrip()) is None:
        raise KekFileError(f"the key-encryption key {path} must hold exactly 64 hexadecimal characters (32 bytes)")
    return bytes.fromhex(text.rstrip().decode("ascii"))


def _read_some(descriptor: int) -> bytes:
    """The file's bytes, or its first _KEK_FILE_MAX + 1 when it is longer (too long to be a key file)."""
    chunks: list[bytes] = []
    size = 0
    while size <= _KEK_FILE_MAX:
        chunk = os.read(descriptor, _KEK_FILE_MAX + 1 - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _binding(project_id: str, name: str, version_id: str) -> bytes:
    """project_id \\0 name \\0 version_id, each checked (ValueError names the argument, not its value)."""
    if not isinstance(project_id, str) or UUID_TEXT.fullmatch(project_id) is None:
        raise ValueError("project_id must be a canonical (lowercase) UUID")
    if not isinstance(version_id, str) or UUID_TEXT.fullmatch(version_id) is None:
        raise ValueError("version_id must be a canonical (lowercase) UUID")
    if not isinstance(name, str) or NAME.fullmatch(name) is None:
        raise ValueError("name must be an environment-variable name: [A-Z_][A-Z0-9_]{0,63}")
    return f"{project_id}\0{name}\0{version_id}".encode("ascii")


def _value_aad(binding: bytes) -> bytes:
    return b"qinglong-secret/v1\0" + binding


def _dek_aad(kid: str, binding: bytes) -> bytes:
    return b"qinglong-dek/v1\0" + kid.encode("ascii") + b"\0" + binding


@dataclass(frozen=True, slots=True)
class _Keys:
    """One consistent set of KEKs: a reload swaps the whole set at once."""

    current_id: str
    by_id: Mapping[str, AESGCM]


class Sealer:
    """The KEKs one shell uses: the current one (wraps every new data key) and any more it still (or already)
    accepts during a rotation. Mutable in place, so a reload reaches every holder."""

    def __init__(self, current: bytes, accepted: Iterable[bytes] = ()) -> None:
        self.load(current, accepted)

    def load(self, current: bytes, accepted: Iterable[bytes] = ()) -> None:
        """Replace the KEKs (ValueError when one is not 32 bytes or two share a kek id: the same key twice)."""
        keys = [current, *accepted]
        if any(not isinstance(key, bytes) or len(key) != KEK_BYTES for key in keys):
            raise ValueError(f"a key-encryption key must be {KEK_BYTES} bytes")
        ids = [kek_id(key) for key in keys]
        if len(set(ids)) != len(ids):
            raise ValueError("a key-encryption key is given twice (an accepted key is the current one or repeated)")
        self._keys = _Keys(ids[0], {kid: AESGCM(key) for kid, key in zip(ids, keys, strict=True)})

    @property
    def current_id(self) -> str:
        return self._keys.current_id

    @property
    def kek_ids(self) -> frozenset[str]:
        """The ids of every KEK this sealer opens with (the current one included)."""
        return frozenset(self._keys.by_id)

    def __repr__(self) -> str:
        accepted = sorted(self.kek_ids - {self.current_id})
        return f"Sealer(current={self.current_id!r}, accepted={accepted!r})"

    def seal(self, value: bytes, *, project_id: str, name: str, version_id: str) -> Sealed:
        """Encrypt a value (1 byte to VALUE_MAX_BYTES) under a fresh data key wrapped by the current KEK."""
        if not isinstance(value, bytes) or not 0 < len(value) <= VALUE_MAX_BYTES:
            raise ValueError(f"a secret value must be bytes, 1 to {VALUE_MAX_BYTES} of them")
        binding = _binding(project_id, name, version_id)
        keys = self._keys
        data_key = os.urandom(KEK_BYTES)
        nonce = os.urandom(NONCE_BYTES)
        ciphertext = AESGCM(data_key).encrypt(nonce, value, _value_aad(binding))
        return Sealed(keys.current_id, self._wrap(keys, data_key, binding), nonce, ciphertext)

    def open(self, sealed: Sealed, *, project_id: str, name: str, version_id: str) -> bytes:
        """The value, when the sealer holds its KEK and nothing was altered or moved; Unsealable otherwise."""
        binding = _binding(project_id, name, version_id)
        data_key = self._unwrap(sealed, binding)
        if len(sealed.nonce) != NONCE_BYTES or len(sealed.ciphertext) <= TAG_BYTES:
            raise Unsealable(TAMPERED, "the sealed value is malformed")
        try:
            return AESGCM(data_key).decrypt(sealed.nonce, sealed.ciphertext, _value_aad(binding))
        except InvalidTag:
            raise Unsealable(TAMPERED, "the sealed value does not authenticate (altered or moved)") from None

    def rewrap(self, sealed: Sealed, *, project_id: str, name: str, version_id: str) -> Sealed:
        """The same value ciphertext and nonce, its data key unwrapped by the KEK that wrapped it and wrapped
        again (fresh nonce) under the current KEK; the value is never decrypted. Unsealable as `open`."""
        binding = _binding(project_id, name, version_id)
        data_key = self._unwrap(sealed, binding)
        keys = self._keys
        return Sealed(keys.current_id, self._wrap(keys, data_key, binding), sealed.nonce, sealed.ciphertext)

    def needs_rewrap(self, sealed: Sealed) -> bool:
        """True when the value's data key is wrapped by a KEK other than the current one."""
        return sealed.kek_id != self.current_id

    @staticmethod
    def _wrap(keys: _Keys, data_key: bytes, binding: bytes) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return nonce + keys.by_id[keys.current_id].encrypt(nonce, data_key, _dek_aad(keys.current_id, binding))

    def _unwrap(self, sealed: Sealed, binding: bytes) -> bytes:
        kek = self._keys.by_id.get(sealed.kek_id)
        if kek is None:
            shown = repr(sealed.kek_id) if isinstance(sealed.kek_id, str) and KEY_ID.fullmatch(sealed.kek_id) else "?"
            raise Unsealable(UNKNOWN_KEK, f"the value is sealed under key-encryption key {shown}, not held here")
        wrapped = sealed.wrapped_key
        if len(wrapped) != WRAPPED_KEY_BYTES:
            raise Unsealable(TAMPERED, "the wrapped data key is malformed")
        try:
            return kek.decrypt(wrapped[:NONCE_BYTES], wrapped[NONCE_BYTES:], _dek_aad(sealed.kek_id, binding))
        except InvalidTag:
            raise Unsealable(TAMPERED, "the wrapped data key does not authenticate (moved or altered)") from None
