"""Envelope encryption of Project secret values (qinglong.shell.sealing), with real AES-256-GCM: values round
trip up to 64 KiB and no further; two seals of one value share nothing; a ciphertext or wrapped key moved
to another project, name or version, altered by one byte or relabelled fails "tampered", an unknown key
"unknown_kek"; a rolling rotation rewraps without decrypting; key files are 64 hex characters, mode 0600,
refused in one line naming the file; no failure shows key or value bytes.
Touches: files under tmp_path.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from qinglong.shell.sealing import (
    VALUE_MAX_BYTES,
    KekFileError,
    Sealed,
    Sealer,
    Unsealable,
    kek_id,
    new_kek,
    read_kek,
)
from qinglong.wire.ql3w import KEY_ID

KEK_A = bytes.fromhex("6b1f0c8e2d4a9375e0b6c2f4a81d3e5c7f9a0b2c4d6e8f1a3b5c7d9e0f2a4b6c")
KEK_B = bytes.fromhex("d2e4f6a8b0c1d3e5f7a9b1c3d5e7f9a0b2c4d6e8fa1c3e5a7b9cadbecf0a1b2c")
KEK_C = bytes.fromhex("0f1e2d3c4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeeff0")
VALUE = b"hunter2-\x00\xff-S3CRET"
PROJECT = "0b9e6f2a-4c1d-4e8a-9f3b-7a2c5d8e1f40"
OTHER_PROJECT = "5e7a1c3b-2d4f-4a6b-8c9d-0e1f2a3b4c5d"
VERSION = "9c8b7a6d-5e4f-4321-8fed-cba987654321"
OTHER_VERSION = "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5e"
NAME = "DATABASE_PASSWORD"
WHERE = {"project_id": PROJECT, "name": NAME, "version_id": VERSION}


def _shown(exc: BaseException) -> str:
    return f"{exc}\n{exc!r}\n{exc.args!r}"


def assert_no_secret(exc: BaseException, *secrets: bytes) -> None:
    """Neither the value nor any KEK appears in the exception, raw, escaped or in hexadecimal."""
    shown = _shown(exc)
    for secret in (VALUE, KEK_A, KEK_B, KEK_C, *secrets):
        for form in (secret.hex(), secret.hex().upper(), secret.decode("latin-1"), repr(secret)[2:-1]):
            assert form not in shown
    assert "\n" not in str(exc)


def unsealable(reason: str, call: object, *args: object, **kwargs: object) -> Unsealable:
    assert callable(call)
    with pytest.raises(Unsealable) as caught:
        call(*args, **kwargs)
    assert caught.value.reason == reason
    assert_no_secret(caught.value)
    return caught.value


def _flip(data: bytes, at: int) -> bytes:
    changed = bytearray(data)
    changed[at] ^= 0x01
    return bytes(changed)


def _with(sealed: Sealed, change: dict[str, bytes]) -> Sealed:
    """`sealed` with some of its bytes fields replaced."""
    fields: dict[str, Any] = {field.name: getattr(sealed, field.name) for field in dataclasses.fields(sealed)}
    return Sealed(**(fields | change))


# Round trips and sizes


@pytest.mark.parametrize(
    "value",
    [b"x", VALUE, b"\x00" * 7 + b"\xff" * 7, os.urandom(VALUE_MAX_BYTES)],
    ids=["one-byte", "small-binary", "nul-and-ff", "exactly-64KiB"],
)
def test_a_value_round_trips(value: bytes) -> None:
    sealer = Sealer(KEK_A)
    sealed = sealer.seal(value, **WHERE)
    assert sealed.kek_id == kek_id(KEK_A) == sealer.current_id
    assert (len(sealed.nonce), len(sealed.wrapped_key), len(sealed.ciphertext)) == (12, 12 + 32 + 16, len(value) + 16)
    assert sealed.ciphertext[:-16] != value
    assert sealer.open(sealed, **WHERE) == value
    assert Sealer(KEK_A).open(sealed, **WHERE) == value  # another holder of the same KEK (another replica)


@pytest.mark.parametrize("value", [b"", b"v" * (VALUE_MAX_BYTES + 1)], ids=["empty", "64KiB+1"])
def test_an_empty_or_oversized_value_is_refused(value: bytes) -> None:
    with pytest.raises(ValueError, match=r"^a secret value must be bytes, 1 to 65536 of them$") as caught:
        Sealer(KEK_A).seal(value, **WHERE)
    assert_no_secret(caught.value)


def test_two_seals_of_one_value_share_nothing() -> None:
    sealer = Sealer(KEK_A)
    first, second = sealer.seal(VALUE, **WHERE), sealer.seal(VALUE, **WHERE)
    assert first.kek_id == second.kek_id
    assert first.nonce != second.nonce
    assert first.wrapped_key[:12] != second.wrapped_key[:12]
    assert first.wrapped_key[12:] != second.wrapped_key[12:]
    assert first.ciphertext != second.ciphertext
    assert sealer.open(first, **WHERE) == sealer.open(second, **WHERE) == VALUE


# What fails to open


@pytest.mark.parametrize(
    "moved",
    [{"project_id": OTHER_PROJECT}, {"name": "DATABASE_PASSWORD2"}, {"version_id": OTHER_VERSION}],
    ids=["project", "name", "version"],
)
def test_a_sealed_value_moved_elsewhere_is_tampered(moved: dict[str, str]) -> None:
    sealer = Sealer(KEK_A)
    sealed = sealer.seal(VALUE, **WHERE)
    unsealable("tampered", sealer.open, sealed, **(WHERE | moved))
    unsealable("tampered", sealer.rewrap, sealed, **(WHERE | moved))


def test_a_value_spliced_with_another_rows_wrapped_key_is_tampered() -> None:
    sealer = Sealer(KEK_A)
    here = sealer.seal(VALUE, **WHERE)
    there = sealer.seal(b"another value", **(WHERE | {"version_id": OTHER_VERSION}))
    # this row's wrapped key (it opens here) with the other row's value: its data key is not this one
    mixed = dataclasses.replace(here, nonce=there.nonce, ciphertext=there.ciphertext)
    unsealable("tampered", sealer.open, mixed, **WHERE)


BINDING = f"{PROJECT}\0{NAME}\0{VERSION}".encode()
VALUE_AAD = b"qinglong-secret/v1\0" + BINDING


def _dek_aad(kid: str) -> bytes:
    return b"qinglong-dek/v1\0" + kid.encode() + b"\0" + BINDING


def test_the_stored_format_is_the_documented_one() -> None:
    """Opened by hand with the documented associated data: a change to either binding fails here."""
    sealed = Sealer(KEK_A).seal(VALUE, **WHERE)
    nonce, wrapped = sealed.wrapped_key[:12], sealed.wrapped_key[12:]
    data_key = AESGCM(KEK_A).decrypt(nonce, wrapped, _dek_aad(kek_id(KEK_A)))
    assert AESGCM(data_key).decrypt(sealed.nonce, sealed.ciphertext, VALUE_AAD) == VALUE


def test_a_value_sealed_for_elsewhere_under_a_key_wrapped_for_here_is_tampered() -> None:
    """The value's own associated data binds it, even when its data key is wrapped for the right place."""
    data_key, nonce, wrap_nonce = os.urandom(32), os.urandom(12), os.urandom(12)
    wrapped = wrap_nonce + AESGCM(KEK_A).encrypt(wrap_nonce, data_key, _dek_aad(kek_id(KEK_A)))
    elsewhere = VALUE_AAD.replace(VERSION.encode(), OTHER_VERSION.encode())
    sealed = Sealed(kek_id(KEK_A), wrapped, nonce, AESGCM(data_key).encrypt(nonce, VALUE, elsewhere))
    unsealable("tampered", Sealer(KEK_A).open, sealed, **WHERE)
    here = dataclasses.replace(sealed, ciphertext=AESGCM(data_key).encrypt(nonce, VALUE, VALUE_AAD))
    assert Sealer(KEK_A).open(here, **WHERE) == VALUE  # the same construction, bound here, opens


def test_a_key_wrapped_under_another_kek_id_label_is_tampered() -> None:
    """The wrapped key's associated data names its kek id: a key wrapped as if for another id does not open."""
    data_key, nonce, wrap_nonce = os.urandom(32), os.urandom(12), os.urandom(12)
    wrapped = wrap_nonce + AESGCM(KEK_A).encrypt(wrap_nonce, data_key, _dek_aad(kek_id(KEK_B)))
    sealed = Sealed(kek_id(KEK_A), wrapped, nonce, AESGCM(data_key).encrypt(nonce, VALUE, VALUE_AAD))
    unsealable("tampered", Sealer(KEK_A, [KEK_B]).open, sealed, **WHERE)


@pytest.mark.parametrize("field", ["ciphertext", "nonce", "wrapped_key"])
@pytest.mark.parametrize("at", [0, -1], ids=["first-byte", "last-byte"])
def test_one_flipped_byte_is_tampered(field: str, at: int) -> None:
    sealer = Sealer(KEK_A)
    sealed = sealer.seal(VALUE, **WHERE)
    altered = _with(sealed, {field: _flip(getattr(sealed, field), at)})
    unsealable("tampered", sealer.open, altered, **WHERE)


@pytest.mark.parametrize(
    "change",
    [
        {"nonce": b"\x00" * 11},
        {"nonce": b"\x00" * 16},
        {"ciphertext": b""},
        {"ciphertext": b"\x00" * 16},
        {"wrapped_key": b""},
        {"wrapped_key": b"\x00" * 59},
    ],
    ids=["short-nonce", "long-nonce", "empty-ciphertext", "tag-only", "empty-wrapped-key", "short-wrapped-key"],
)
def test_a_malformed_field_is_tampered(change: dict[str, bytes]) -> None:
    sealer = Sealer(KEK_A)
    sealed = _with(sealer.seal(VALUE, **WHERE), change)
    unsealable("tampered", sealer.open, sealed, **WHERE)


def test_a_kek_id_relabelled_to_another_held_key_is_tampered() -> None:
    sealer = Sealer(KEK_A, [KEK_B])
    relabelled = dataclasses.replace(sealer.seal(VALUE, **WHERE), kek_id=kek_id(KEK_B))
    unsealable("tampered", sealer.open, relabelled, **WHERE)
    unsealable("tampered", sealer.rewrap, relabelled, **WHERE)


@pytest.mark.parametrize("kid", [kek_id(KEK_C), "", "not a kek id \x00"], ids=["another-key", "empty", "garbage"])
def test_an_unknown_kek_id_is_unknown_kek(kid: str) -> None:
    sealer = Sealer(KEK_A, [KEK_B])
    sealed = dataclasses.replace(sealer.seal(VALUE, **WHERE), kek_id=kid)
    exc = unsealable("unknown_kek", sealer.open, sealed, **WHERE)
    unsealable("unknown_kek", sealer.rewrap, sealed, **WHERE)
    assert "\x00" not in str(exc)  # an id that is no kek id is not echoed


# Rotation


def test_a_rolling_rotation_rewraps_without_the_old_key() -> None:
    old = Sealer(KEK_A)
    sealed = old.seal(VALUE, **WHERE)
    assert not old.needs_rewrap(sealed)

    rotating = Sealer(KEK_B, [KEK_A])
    assert rotating.current_id == kek_id(KEK_B)
    assert rotating.open(sealed, **WHERE) == VALUE
    assert rotating.needs_rewrap(sealed)
    rewrapped = rotating.rewrap(sealed, **WHERE)
    assert rewrapped.kek_id == kek_id(KEK_B)
    assert (rewrapped.nonce, rewrapped.ciphertext) == (sealed.nonce, sealed.ciphertext)
    assert rewrapped.wrapped_key != sealed.wrapped_key
    assert not rotating.needs_rewrap(rewrapped)
    assert rotating.seal(VALUE, **WHERE).kek_id == kek_id(KEK_B)

    new = Sealer(KEK_B)
    assert new.open(rewrapped, **WHERE) == VALUE
    unsealable("unknown_kek", new.open, sealed, **WHERE)
    assert new.needs_rewrap(sealed)
    assert not new.needs_rewrap(rewrapped)


def test_rewrap_never_decrypts_the_value() -> None:
    sealer = Sealer(KEK_B, [KEK_A])
    sealed = Sealer(KEK_A).seal(VALUE, **WHERE)
    broken = dataclasses.replace(sealed, ciphertext=_flip(sealed.ciphertext, 0))
    rewrapped = sealer.rewrap(broken, **WHERE)  # the value ciphertext is carried, not opened
    assert (rewrapped.kek_id, rewrapped.ciphertext) == (kek_id(KEK_B), broken.ciphertext)
    unsealable("tampered", sealer.open, rewrapped, **WHERE)


def test_load_replaces_the_keys_in_place_for_every_holder() -> None:
    sealer = Sealer(KEK_A)
    holders = {"worker_app": sealer, "user_app": sealer}
    sealed = sealer.seal(VALUE, **WHERE)

    sealer.load(KEK_B, [KEK_A])
    assert holders["user_app"].current_id == kek_id(KEK_B)
    assert holders["user_app"].open(sealed, **WHERE) == VALUE
    assert holders["worker_app"].needs_rewrap(sealed)

    sealer.load(KEK_B)
    unsealable("unknown_kek", holders["user_app"].open, sealed, **WHERE)


@pytest.mark.parametrize(
    ("current", "accepted", "message"),
    [
        (KEK_A, [KEK_A], r"given twice"),
        (KEK_A, [KEK_B, KEK_B], r"given twice"),
        (KEK_A[:31], [], r"must be 32 bytes"),
        (KEK_A, [KEK_B + b"\x00"], r"must be 32 bytes"),
    ],
    ids=["accepted-is-current", "accepted-twice", "short-current", "long-accepted"],
)
def test_load_refuses_duplicate_or_misshapen_keys_and_keeps_the_old_ones(
    current: bytes, accepted: list[bytes], message: str
) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        Sealer(current, accepted)
    assert_no_secret(caught.value)
    sealer = Sealer(KEK_C)
    with pytest.raises(ValueError, match=message):
        sealer.load(current, iter(accepted))
    assert sealer.current_id == kek_id(KEK_C)
    assert sealer.kek_ids == {kek_id(KEK_C)}


def test_a_kek_id_is_public_and_names_one_key() -> None:
    assert KEY_ID.fullmatch(kek_id(KEK_A))
    assert kek_id(KEK_A) == kek_id(bytes(KEK_A)) != kek_id(KEK_B)
    assert KEK_A.hex()[:8] not in kek_id(KEK_A).lower()
    assert repr(Sealer(KEK_A, [KEK_B])) == f"Sealer(current={kek_id(KEK_A)!r}, accepted=[{kek_id(KEK_B)!r}])"


# Key files


def _key_file(folder: Path, text: bytes, mode: int = 0o600) -> Path:
    path = folder / "secrets.kek"
    path.write_bytes(text)
    path.chmod(mode)
    return path


@pytest.mark.parametrize(
    "text",
    [KEK_A.hex().encode(), KEK_A.hex().encode() + b"\n", KEK_A.hex().upper().encode() + b" \r\n\t"],
    ids=["bare", "newline", "uppercase-and-whitespace"],
)
def test_a_good_key_file_is_read(tmp_path: Path, text: bytes) -> None:
    assert read_kek(_key_file(tmp_path, text)) == KEK_A


@pytest.mark.parametrize(
    ("text", "mode", "message"),
    [
        (KEK_A.hex()[:63].encode() + b"\n", 0o600, r"must hold exactly 64 hexadecimal characters \(32 bytes\)$"),
        (KEK_A.hex().encode() + b"0\n", 0o600, r"must hold exactly 64 hexadecimal characters \(32 bytes\)$"),
        (KEK_A.hex()[:63].encode() + b"g", 0o600, r"must hold exactly 64 hexadecimal characters \(32 bytes\)$"),
        (b" " + KEK_A.hex().encode(), 0o600, r"must hold exactly 64 hexadecimal characters \(32 bytes\)$"),
        (KEK_A.hex().encode() + b"\n" + KEK_B.hex().encode(), 0o600, r"must hold exactly 64 hexadecimal"),
        (KEK_A, 0o600, r"must hold exactly 64 hexadecimal characters \(32 bytes\)$"),
        (KEK_A.hex().encode(), 0o644, r"must not be readable or writable by group or others \(chmod 600\)$"),
        (KEK_A.hex().encode(), 0o640, r"must not be readable or writable by group or others \(chmod 600\)$"),
        (KEK_A.hex().encode(), 0o620, r"must not be readable or writable by group or others \(chmod 600\)$"),
        (KEK_A.hex().encode(), 0o602, r"must not be readable or writable by group or others \(chmod 600\)$"),
    ],
    ids=["63-chars", "65-chars", "non-hex", "leading-space", "two-keys", "raw-bytes", "0644", "0640", "0620", "0602"],
)
def test_a_bad_key_file_is_one_line_naming_it_without_its_content(
    tmp_path: Path, text: bytes, mode: int, message: str
) -> None:
    path = _key_file(tmp_path, text, mode)
    with pytest.raises(KekFileError, match=message) as caught:
        read_kek(path)
    assert isinstance(caught.value, ValueError)
    assert str(path) in str(caught.value)
    assert_no_secret(caught.value, text, text.strip())
    assert KEK_A.hex()[:16] not in _shown(caught.value)


def test_a_missing_key_file_is_one_line_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "absent.kek"
    with pytest.raises(KekFileError, match=r"^cannot read the key-encryption key .*/absent\.kek: No such file") as c:
        read_kek(path)
    assert_no_secret(c.value)


def test_a_directory_is_not_a_key_file(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.mkdir(mode=0o700)
    with pytest.raises(KekFileError, match=r"keys"):
        read_kek(path)


def test_a_fifo_is_not_a_key_file_and_does_not_hang(tmp_path: Path) -> None:
    path = tmp_path / "pipe.kek"
    os.mkfifo(path, 0o600)
    with pytest.raises(KekFileError, match=r"^the key-encryption key .*/pipe\.kek is not a regular file$"):
        read_kek(path)


def test_an_oversized_key_file_is_refused(tmp_path: Path) -> None:
    path = _key_file(tmp_path, KEK_A.hex().encode() + b" " * 10_000)
    with pytest.raises(KekFileError, match=r"must hold exactly 64 hexadecimal characters"):
        read_kek(path)


def test_a_new_key_file_is_read_back(tmp_path: Path) -> None:
    text = new_kek()
    assert len(text) == 65 and text.endswith("\n")
    path = tmp_path / "new.kek"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)
    kek = read_kek(path)
    assert kek.hex() == text.strip()
    assert new_kek() != text
    assert Sealer(kek).open(Sealer(kek).seal(VALUE, **WHERE), **WHERE) == VALUE


# The binding


def _every_call(where: dict[str, str]) -> list[Callable[[], object]]:
    """seal, open and rewrap, each bound to `where`."""
    sealer = Sealer(KEK_A)
    sealed = sealer.seal(VALUE, **WHERE)
    return [
        lambda: sealer.seal(VALUE, **where),
        lambda: sealer.open(sealed, **where),
        lambda: sealer.rewrap(sealed, **where),
    ]


BAD_UUIDS = [PROJECT.upper(), "{" + PROJECT + "}", PROJECT.replace("-", ""), PROJECT + "\n", ""]
BAD_NAMES = ["database_password", "1PASSWORD", "A" * 65, "", "DB-PASSWORD", "ÉTÉ", "PASSWORD\n", "PASS WORD"]


@pytest.mark.parametrize("bad", BAD_UUIDS, ids=["uppercase", "braces", "no-hyphens", "newline", "empty"])
@pytest.mark.parametrize("field", ["project_id", "version_id"])
def test_a_non_canonical_uuid_is_refused(field: str, bad: str) -> None:
    for call in _every_call(WHERE | {field: bad}):
        with pytest.raises(ValueError, match=rf"^{field} must be a canonical \(lowercase\) UUID$") as caught:
            call()
        assert_no_secret(caught.value)


@pytest.mark.parametrize(
    "bad", BAD_NAMES, ids=["lowercase", "leading-digit", "65-chars", "empty", "hyphen", "non-ascii", "nl", "space"]
)
def test_a_bad_name_is_refused(bad: str) -> None:
    for call in _every_call(WHERE | {"name": bad}):
        with pytest.raises(ValueError, match=r"^name must be an environment-variable name") as caught:
            call()
        assert_no_secret(caught.value)


@pytest.mark.parametrize("name", ["_", "A", "_9", "A" * 64, "Z" + "_0" * 31])
def test_a_good_name_is_accepted(name: str) -> None:
    sealer = Sealer(KEK_A)
    assert sealer.open(sealer.seal(VALUE, **(WHERE | {"name": name})), **(WHERE | {"name": name})) == VALUE


def test_sealed_is_a_frozen_record_of_four_fields() -> None:
    sealed = Sealer(KEK_A).seal(VALUE, **WHERE)
    assert [field.name for field in dataclasses.fields(Sealed)] == ["kek_id", "wrapped_key", "nonce", "ciphertext"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        sealed.kek_id = "x"  # type: ignore[misc]
