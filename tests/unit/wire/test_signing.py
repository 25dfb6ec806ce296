"""Tests of plan signatures and plan key files (qinglong.wire.signing). Touches temporary folders (key files).

A signed plan verifies only unchanged, for its own Project, under a trusted key: every single-field change of the
plan, another Project, an unknown key, a missing or garbled signature is refused with its stable code. The signed
bytes are pinned (a CLI and a Worker of different versions must agree on them) and do not depend on the key order
of the stored object. Key files are written exclusively with exact modes, and the loaders refuse every bad file
in one line naming the file.
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from qinglong.wire import WireError
from qinglong.wire.offer import Plan, PlanSignature
from qinglong.wire.signing import (
    PLAN_CODES,
    PLAN_SIGNATURE_INVALID,
    PLAN_SIGNER_UNKNOWN,
    PLAN_UNSIGNED,
    PlanRefused,
    key_id,
    load_private_key,
    load_public_key,
    load_trusted,
    public_key_path,
    sign,
    signing_message,
    verify,
    write_private_key,
)

PROJECT: Final = "6f1c1f1e-2a4b-4c8d-9e0f-1a2b3c4d5e6f"
OTHER_PROJECT: Final = "6f1c1f1e-2a4b-4c8d-9e0f-1a2b3c4d5e70"
BUNDLE: Final = "ab" * 32
# Every key a plan may hold, each set, and for each one a plan differing from FULL in that key alone.
FULL: Final[dict[str, Any]] = {
    "argv": ["sh", "-c", "echo hi"],
    "env": {"A": "1", "B": "2"},
    "timeoutMs": 60_000,
    "leaseMs": 300_000,
    "maxAttempts": 3,
    "retryBackoffMs": 1000,
    "pool": "build",
    "cwd": "work",
    "user": "runner",
    "group": "runners",
    "secretEnv": {"API_TOKEN": "API_TOKEN"},
    "secretFiles": {"token.txt": "API_TOKEN"},
    "bundle": BUNDLE,
}
CHANGES: Final[dict[str, dict[str, Callable[[dict[str, Any]], None]]]] = {
    "argv": {
        "an item": lambda p: p.update(argv=["sh", "-c", "echo HI"]),
        "an item more": lambda p: p.update(argv=["sh", "-c", "echo hi", "x"]),
        "items joined": lambda p: p.update(argv=["sh", "-c echo hi"]),
        "items swapped": lambda p: p.update(argv=["-c", "sh", "echo hi"]),
    },
    "env": {
        "a value": lambda p: p.update(env={"A": "1", "B": "3"}),
        "a name": lambda p: p.update(env={"A": "1", "C": "2"}),
        "an entry more": lambda p: p.update(env={"A": "1", "B": "2", "C": "3"}),
        "absent": lambda p: p.pop("env"),
    },
    "timeoutMs": {"a value": lambda p: p.update(timeoutMs=60_001), "absent": lambda p: p.pop("timeoutMs")},
    "leaseMs": {"a value": lambda p: p.update(leaseMs=300_001), "absent": lambda p: p.pop("leaseMs")},
    "maxAttempts": {"a value": lambda p: p.update(maxAttempts=4), "absent": lambda p: p.pop("maxAttempts")},
    "retryBackoffMs": {"a value": lambda p: p.update(retryBackoffMs=0), "absent": lambda p: p.pop("retryBackoffMs")},
    "pool": {"a value": lambda p: p.update(pool="default"), "absent": lambda p: p.pop("pool")},
    "cwd": {"a value": lambda p: p.update(cwd="/"), "absent": lambda p: p.pop("cwd")},
    "user": {"a value": lambda p: p.update(user="root"), "absent": lambda p: p.pop("user")},
    "group": {"a value": lambda p: p.update(group="root"), "absent": lambda p: p.pop("group")},
    "secretEnv": {
        "a secret": lambda p: p.update(secretEnv={"API_TOKEN": "OTHER"}),
        "a variable": lambda p: p.update(secretEnv={"OTHER": "API_TOKEN"}),
        "absent": lambda p: p.pop("secretEnv"),
    },
    "secretFiles": {
        "a secret": lambda p: p.update(secretFiles={"token.txt": "OTHER"}),
        "a path": lambda p: p.update(secretFiles={"other.txt": "API_TOKEN"}),
        "absent": lambda p: p.pop("secretFiles"),
    },
    "bundle": {"a digest": lambda p: p.update(bundle="cd" * 32), "absent": lambda p: p.pop("bundle")},
}
PLAN_KEYS: Final = frozenset(f.name for f in Plan.FIELDS)


def full_plan() -> dict[str, Any]:
    """FULL with only the keys this version of Plan declares (bundle came later)."""
    return {k: (dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v) for k, v in FULL.items()
            if k in PLAN_KEYS}  # fmt: skip


def fixed_key(seed: int) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(bytes([seed]) * 32)


KEY: Final = fixed_key(1)
TRUSTED: Final[dict[str, Ed25519PublicKey]] = {key_id(KEY.public_key()): KEY.public_key()}


def refused_code(plan: Plan, signature: PlanSignature | None, project: str = PROJECT) -> str:
    with pytest.raises(PlanRefused) as caught:
        verify(TRUSTED, project, plan, signature)
    assert caught.value.code in PLAN_CODES
    return caught.value.code


# -- signing and verifying ---------------------------------------------------------------------------------------


def test_a_signed_plan_verifies_for_its_project_under_a_trusted_key() -> None:
    plan = Plan.from_obj(full_plan())
    signature = sign(KEY, PROJECT, plan)
    assert signature.key_id == key_id(KEY.public_key()) and len(signature.signature) == 64
    verify(TRUSTED, PROJECT, plan, signature)
    verify(TRUSTED, PROJECT, Plan.from_obj(plan.to_obj()), PlanSignature.from_obj(signature.to_obj()))
    minimal = Plan(argv=("true",))
    verify(TRUSTED, PROJECT, minimal, sign(KEY, PROJECT, minimal))


def test_every_key_of_a_plan_has_its_change_cases() -> None:
    assert set(PLAN_KEYS) <= set(CHANGES), "a new Plan key needs cases here"


CASES: Final = [
    pytest.param(name, change, id=f"{name}: {what}")
    for name, changes in CHANGES.items()
    for what, change in changes.items()
]


@pytest.mark.parametrize(("name", "change"), CASES)
def test_every_single_change_of_a_signed_plan_is_refused(name: str, change: Callable[[dict[str, Any]], None]) -> None:
    if name not in PLAN_KEYS:
        pytest.skip(f"this version of Plan has no {name}")
    original = full_plan()
    signature = sign(KEY, PROJECT, Plan.from_obj(original))
    changed = full_plan()
    change(changed)
    assert changed != original
    assert refused_code(Plan.from_obj(changed), signature) == PLAN_SIGNATURE_INVALID


@pytest.mark.parametrize("name", sorted(PLAN_KEYS - {"argv"}))
def test_a_key_added_to_a_minimal_signed_plan_is_refused(name: str) -> None:
    signature = sign(KEY, PROJECT, Plan(argv=("sh", "-c", "echo hi")))
    added = Plan.from_obj({"argv": ["sh", "-c", "echo hi"], name: full_plan()[name]})
    assert refused_code(added, signature) == PLAN_SIGNATURE_INVALID


def test_a_plan_signed_for_one_project_is_refused_in_another() -> None:
    plan = Plan.from_obj(full_plan())
    signature = sign(KEY, PROJECT, plan)
    assert refused_code(plan, signature, OTHER_PROJECT) == PLAN_SIGNATURE_INVALID


def test_a_project_id_is_lower_case_uuid_text_only() -> None:
    plan = Plan(argv=("true",))
    for bad in (PROJECT.upper(), PROJECT.replace("-", ""), "{" + PROJECT + "}", ""):
        with pytest.raises(WireError) as caught:
            signing_message(bad, plan)
        assert caught.value.code == "wire.bad_uuid"


def test_an_unknown_key_is_refused_before_any_check_of_the_signature() -> None:
    plan = Plan.from_obj(full_plan())
    stranger = fixed_key(2)
    assert refused_code(plan, sign(stranger, PROJECT, plan)) == PLAN_SIGNER_UNKNOWN
    with pytest.raises(PlanRefused) as caught:
        verify({}, PROJECT, plan, sign(KEY, PROJECT, plan))
    assert caught.value.code == PLAN_SIGNER_UNKNOWN and key_id(KEY.public_key()) in caught.value.message


def test_no_signature_is_refused_as_unsigned() -> None:
    assert refused_code(Plan(argv=("true",)), None) == PLAN_UNSIGNED


def test_a_signature_by_another_key_under_a_trusted_key_id_is_invalid() -> None:
    plan = Plan.from_obj(full_plan())
    forged = PlanSignature(key_id=key_id(KEY.public_key()), signature=fixed_key(2).sign(signing_message(PROJECT, plan)))
    assert refused_code(plan, forged) == PLAN_SIGNATURE_INVALID


@pytest.mark.parametrize("flip", [0, 31, 32, 63])
def test_a_garbled_signature_is_invalid(flip: int) -> None:
    plan = Plan.from_obj(full_plan())
    good = sign(KEY, PROJECT, plan)
    garbled = bytearray(good.signature)
    garbled[flip] ^= 0x01
    assert refused_code(plan, PlanSignature(key_id=good.key_id, signature=bytes(garbled))) == PLAN_SIGNATURE_INVALID
    assert refused_code(plan, PlanSignature(key_id=good.key_id, signature=bytes(64))) == PLAN_SIGNATURE_INVALID
    # S ≥ the group order: a non-canonical (malleable) form of a valid signature is refused too
    order = 2**252 + 27742317777372353535851937790883648493
    s = int.from_bytes(good.signature[32:], "little") + order
    malleable = PlanSignature(key_id=good.key_id, signature=good.signature[:32] + s.to_bytes(32, "little"))
    assert refused_code(plan, malleable) == PLAN_SIGNATURE_INVALID


def test_a_truncated_or_malformed_signature_is_a_wire_error() -> None:
    good = sign(KEY, PROJECT, Plan(argv=("true",))).to_obj()
    text = str(good["signature"])
    cases: dict[str, tuple[dict[str, object], str]] = {
        "63 bytes": ({**good, "signature": base64.b64encode(bytes(63)).decode()}, "wire.too_short"),
        "65 bytes": ({**good, "signature": base64.b64encode(bytes(65)).decode()}, "wire.too_long"),
        "cut": ({**good, "signature": text[:-4]}, "wire.too_short"),
        "no padding": ({**good, "signature": text.rstrip("=")}, "wire.bad_base64"),
        "base64url": ({**good, "signature": base64.urlsafe_b64encode(b"\xff" * 64).decode()}, "wire.bad_base64"),
        "key id upper case": ({**good, "keyId": str(good["keyId"]).upper()}, "wire.bad_pattern"),
        "key id short": ({**good, "keyId": str(good["keyId"])[:15]}, "wire.too_short"),
        "key id missing": ({"signature": text}, "wire.missing_field"),
        "extra key": ({**good, "alg": "none"}, "wire.unknown_field"),
    }
    for what, (obj, code) in cases.items():
        with pytest.raises(WireError) as caught:
            PlanSignature.from_obj(obj)
        assert caught.value.code == code, what
    with pytest.raises(WireError):
        PlanSignature(key_id="0" * 16, signature=bytes(63))


def test_the_signature_travels_as_key_id_and_padded_base64() -> None:
    signature = sign(KEY, PROJECT, Plan(argv=("true",)))
    obj = signature.to_obj()
    assert set(obj) == {"keyId", "signature"}
    assert obj["keyId"] == signature.key_id and base64.b64decode(str(obj["signature"])) == signature.signature
    assert PlanSignature.from_obj(obj) == signature


def test_the_key_id_is_stable() -> None:
    public = KEY.public_key()
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert key_id(public) == hashlib.sha256(raw).hexdigest()[:16]
    assert key_id(public) == "34750f98bd59fcfc"  # a fixed key's id never changes
    assert key_id(fixed_key(2).public_key()) != key_id(public)
    reloaded = serialization.load_pem_public_key(
        public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    assert isinstance(reloaded, Ed25519PublicKey) and key_id(reloaded) == key_id(public)


def test_the_signed_bytes_are_pinned() -> None:
    plan = Plan.from_obj({"pool": "build", "argv": ["echo", "é"], "env": {"B": "2", "A": "1"}, "timeoutMs": 5})
    assert signing_message(PROJECT, plan) == (
        b"qinglong-plan-v1\n6f1c1f1e-2a4b-4c8d-9e0f-1a2b3c4d5e6f\n"
        b'{"argv":["echo","\xc3\xa9"],"env":{"A":"1","B":"2"},"pool":"build","timeoutMs":5}'
    )
    # Ed25519 is deterministic: the same key, Project and plan always give the same signature
    assert sign(KEY, PROJECT, plan) == sign(KEY, PROJECT, plan)


def test_the_key_order_of_the_stored_object_does_not_matter() -> None:
    ordered = full_plan()
    shuffled = {k: ordered[k] for k in reversed(ordered)}
    for name in ("env", "secretEnv", "secretFiles"):
        shuffled[name] = {k: ordered[name][k] for k in reversed(ordered[name])}
    shuffled["env"] = {"B": "2", "A": "1"}
    assert list(shuffled) != list(ordered) and list(shuffled["env"]) != list(ordered["env"])
    signature = sign(KEY, PROJECT, Plan.from_obj(ordered))
    verify(TRUSTED, PROJECT, Plan.from_obj(shuffled), signature)
    assert signing_message(PROJECT, Plan.from_obj(shuffled)) == signing_message(PROJECT, Plan.from_obj(ordered))


def test_non_ascii_arguments_sign_and_verify_as_utf_8() -> None:
    argv = ["echo", "héllo", "日本語", "🐉", "ℌ"]  # noqa: RUF001  (a non-ASCII letter on purpose)
    plan = Plan.from_obj({"argv": argv, "env": {"GRÜSS": "grüß"}})
    verify(TRUSTED, PROJECT, plan, sign(KEY, PROJECT, plan))
    message = signing_message(PROJECT, plan)
    assert "日本語".encode() in message and b"\\u" not in message
    decomposed = Plan.from_obj({"argv": ["echo", "he\u0301llo", "日本語", "🐉", "ℌ"], "env": {"GRÜSS": "grüß"}})  # noqa: RUF001
    assert refused_code(decomposed, sign(KEY, PROJECT, plan)) == PLAN_SIGNATURE_INVALID, "no Unicode normalisation"


# -- key files ---------------------------------------------------------------------------------------------------


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask() -> Iterator[Callable[[int], int]]:
    old = os.umask(0o022)
    os.umask(old)
    yield os.umask
    os.umask(old)


@pytest.mark.parametrize("mask", [0o000, 0o022, 0o077])
def test_a_new_key_pair_has_exact_modes_whatever_the_umask(
    tmp_path: Path, umask: Callable[[int], int], mask: int
) -> None:
    umask(mask)
    made = write_private_key(tmp_path / "ops.key")
    assert (made.private, made.public) == (tmp_path / "ops.key", tmp_path / "ops.pub")
    assert mode(made.private) == 0o600 and mode(made.public) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ops.key", "ops.pub"]
    private, public = load_private_key(made.private), load_public_key(made.public)
    assert key_id(private.public_key()) == key_id(public) == made.key_id
    assert made.private.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----\n")
    assert made.public.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----\n")
    plan = Plan(argv=("true",))
    verify(load_trusted([made.public]), PROJECT, plan, sign(private, PROJECT, plan))


def test_the_public_file_sits_beside_the_private_one() -> None:
    assert public_key_path(Path("/k/ops.key")) == Path("/k/ops.pub")
    assert public_key_path(Path("/k/ops")) == Path("/k/ops.pub")
    assert public_key_path(Path("/k/ops.pem")) == Path("/k/ops.pem.pub")
    assert public_key_path(Path("/k/ops.v2.key")) == Path("/k/ops.v2.pub")


def test_a_private_key_path_ending_in_pub_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"must not end in \.pub"):
        write_private_key(tmp_path / "ops.pub")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("existing", ["ops.key", "ops.pub", "both"])
def test_a_key_file_is_never_overwritten(tmp_path: Path, existing: str) -> None:
    names = ["ops.key", "ops.pub"] if existing == "both" else [existing]
    for name in names:
        (tmp_path / name).write_bytes(b"old " + name.encode())
    with pytest.raises(FileExistsError) as caught:
        write_private_key(tmp_path / "ops.key")
    assert caught.value.filename in {str(tmp_path / n) for n in names}
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == {n: b"old " + n.encode() for n in names}


def test_a_symlink_is_never_followed_when_writing(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    (tmp_path / "ops.key").symlink_to(target)
    with pytest.raises(FileExistsError):
        write_private_key(tmp_path / "ops.key")
    (tmp_path / "ops.key").unlink()
    (tmp_path / "ops.pub").symlink_to(target)
    with pytest.raises(FileExistsError):
        write_private_key(tmp_path / "ops.key")
    assert not target.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["ops.pub"]


def _pem_private(key: Any, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)
    return path


def _pem_public(key: Any, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    path.chmod(0o644)
    return path


def test_a_key_of_another_type_is_refused(tmp_path: Path) -> None:
    keys = {"RSA": rsa.generate_private_key(65537, 2048), "EC": ec.generate_private_key(ec.SECP256R1())}
    for kind, key in keys.items():
        private = _pem_private(key, tmp_path, f"{kind}.key")
        with pytest.raises(ValueError) as caught:
            load_private_key(private)
        assert str(caught.value) == f"{private}: holds a key of type {kind}, not an Ed25519 key"
        public = _pem_public(key, tmp_path, f"{kind}.pub")
        with pytest.raises(ValueError) as caught:
            load_public_key(public)
        assert str(caught.value) == f"{public}: holds a key of type {kind}, not an Ed25519 key"


@pytest.mark.parametrize("bits", [0o640, 0o604, 0o644, 0o660, 0o620, 0o602, 0o610])
def test_a_private_key_others_may_read_is_refused(tmp_path: Path, bits: int) -> None:
    made = write_private_key(tmp_path / "ops.key")
    made.private.chmod(bits)
    with pytest.raises(ValueError) as caught:
        load_private_key(made.private)
    assert str(caught.value) == f"{made.private}: a private key others may read (mode {bits:04o}): chmod 600 it"
    for fine in (0o400, 0o700):
        made.private.chmod(fine)
        load_private_key(made.private)


@pytest.mark.parametrize("bits", [0o664, 0o646])
def test_a_public_key_others_may_change_is_refused(tmp_path: Path, bits: int) -> None:
    made = write_private_key(tmp_path / "ops.key")
    made.public.chmod(bits)
    with pytest.raises(ValueError, match=r"a public key others may change .*chmod go-w"):
        load_public_key(made.public)
    with pytest.raises(ValueError, match=str(made.public)):
        load_trusted([made.public])


def _secret_lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line and not line.startswith("-----")]


@pytest.mark.parametrize(
    ("content", "private_says", "public_says"),
    [
        (b"", "not a PEM private key", "not a PEM public key"),
        (b"garbage\n", "not a PEM private key", "not a PEM public key"),
        (b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "not a PEM private key", "holds a private"),
        (b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "holds a public key", "not a PEM public key"),
        (b"\xff\xfe\x00binary", "not a PEM private key", "not a PEM public key"),
        (b"A" * 20_000, "larger than 16384 bytes", "larger than 16384 bytes"),
    ],
    ids=["empty", "garbage", "bad private body", "bad public body", "binary", "huge"],
)
def test_a_malformed_key_file_is_one_line_naming_the_file(
    tmp_path: Path, content: bytes, private_says: str, public_says: str
) -> None:
    path = tmp_path / "bad"
    path.write_bytes(content)
    path.chmod(0o600)
    for load, says in ((load_private_key, private_says), (load_public_key, public_says)):
        with pytest.raises(ValueError) as caught:
            load(path)
        text = str(caught.value)
        assert text.startswith(f"{path}: ") and says in text and "\n" not in text, text


def test_a_truncated_key_file_is_refused_and_no_message_shows_key_bytes(tmp_path: Path) -> None:
    made = write_private_key(tmp_path / "ops.key")
    secret = _secret_lines(made.private)
    made.private.write_bytes(made.private.read_bytes()[:-40])
    messages = []
    for load, path in ((load_private_key, made.private), (load_public_key, made.private)):
        with pytest.raises(ValueError) as caught:
            load(path)
        messages.append(str(caught.value))
    assert all(line not in m for m in messages for line in secret), messages


def test_a_public_file_is_not_a_private_key_nor_the_other_way_round(tmp_path: Path) -> None:
    made = write_private_key(tmp_path / "ops.key")
    made.public.chmod(0o600)
    with pytest.raises(ValueError, match="holds a public key, not a private key"):
        load_private_key(made.public)
    with pytest.raises(ValueError, match="holds a private key, not a public key"):
        load_public_key(made.private)


def test_an_encrypted_private_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "enc.key"
    path.write_bytes(
        fixed_key(3).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"pass phrase"),
        )
    )
    path.chmod(0o600)
    with pytest.raises(ValueError, match="an encrypted private key"):
        load_private_key(path)


def test_a_missing_unreadable_or_odd_file_is_one_line(tmp_path: Path) -> None:
    for load in (load_private_key, load_public_key):
        with pytest.raises(ValueError) as caught:
            load(tmp_path / "missing.key")
        assert str(caught.value) == f"{tmp_path / 'missing.key'}: no such key file"
        with pytest.raises(ValueError) as caught:
            load(tmp_path)
        assert str(caught.value).startswith(f"{tmp_path}: ")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(ValueError, match="not a regular file"):
        load_private_key(fifo)  # and it does not hang waiting for a writer
    made = write_private_key(tmp_path / "ops.key")
    made.private.chmod(0o000)
    if os.geteuid() != 0:  # root reads any file
        with pytest.raises(ValueError, match=r"cannot read the key file: Permission denied"):
            load_private_key(made.private)


def test_a_key_file_reached_through_a_symlink_is_read(tmp_path: Path) -> None:
    made = write_private_key(tmp_path / "ops.key")
    (tmp_path / "link.pub").symlink_to(made.public)
    assert key_id(load_public_key(tmp_path / "link.pub")) == made.key_id


# -- the Worker's trusted keys -----------------------------------------------------------------------------------


def test_trusted_keys_are_named_by_their_key_id(tmp_path: Path) -> None:
    a = write_private_key(tmp_path / "a.key")
    b = write_private_key(tmp_path / "b.key")
    trusted = load_trusted([a.public, b.public])
    assert set(trusted) == {a.key_id, b.key_id}
    assert load_trusted([]) == {}
    plan = Plan(argv=("true",))
    for made in (a, b):
        verify(trusted, PROJECT, plan, sign(load_private_key(made.private), PROJECT, plan))


def test_a_key_trusted_twice_or_a_bad_file_is_refused(tmp_path: Path) -> None:
    a = write_private_key(tmp_path / "a.key")
    copy = tmp_path / "copy.pub"
    copy.write_bytes(a.public.read_bytes())
    copy.chmod(0o644)
    for paths in ([a.public, a.public], [a.public, copy]):
        with pytest.raises(ValueError) as caught:
            load_trusted(paths)
        assert str(caught.value) == f"{paths[1]}: key {a.key_id} is already trusted (from {a.public})"
    with pytest.raises(ValueError, match=f"^{tmp_path / 'nope.pub'}: no such key file$"):
        load_trusted([a.public, tmp_path / "nope.pub"])
    with pytest.raises(ValueError, match="holds a private key"):
        load_trusted([a.private])
