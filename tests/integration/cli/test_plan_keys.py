"""`qinglong pki plan-key new/show`, run as an operator runs it, as a child process (the helpers are test_cli's):
`new` makes ops.key (0600) and ops.pub (0644) and prints the key id, `show` prints the same id for either file, a
key file is never overwritten, and every refusal is one line on stderr with exit 2 and no traceback.

Touches: temporary folders (key files), child processes.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Final

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from qinglong.wire.offer import Plan
from qinglong.wire.signing import key_id, load_private_key, load_trusted, sign, verify
from tests.integration.cli.test_cli import cli, done, mode, refused

KEY_ID: Final = "[0-9a-f]{16}"
PROJECT: Final = "6f1c1f1e-2a4b-4c8d-9e0f-1a2b3c4d5e6f"


def _new(path: Path) -> str:
    """`plan-key new PATH`: the key id it printed."""
    public = path.with_suffix(".pub") if path.suffix == ".key" else path.with_name(path.name + ".pub")
    out = cli("pki", "plan-key", "new", str(path))
    pattern = (
        rf"plan key ({KEY_ID}): private {re.escape(str(path))} \(mode 0600\), public {re.escape(str(public))} .*\n"
    )
    return done(out, pattern)[1]


def test_new_makes_a_key_pair_and_prints_its_id_which_show_prints_for_either_file(tmp_path: Path) -> None:
    kid = _new(tmp_path / "ops.key")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ops.key", "ops.pub"]
    assert mode(tmp_path / "ops.key") == 0o600 and mode(tmp_path / "ops.pub") == 0o644
    assert done(cli("pki", "plan-key", "show", str(tmp_path / "ops.key")), rf"({KEY_ID})\n")[1] == kid
    assert done(cli("pki", "plan-key", "show", str(tmp_path / "ops.pub")), rf"({KEY_ID})\n")[1] == kid
    # what the CLI made signs what a Worker trusting the .pub verifies
    private = load_private_key(tmp_path / "ops.key")
    assert key_id(private.public_key()) == kid
    plan = Plan(argv=("true",))
    verify(load_trusted([tmp_path / "ops.pub"]), PROJECT, plan, sign(private, PROJECT, plan))


def test_two_new_keys_differ_and_a_name_without_key_gets_pub_appended(tmp_path: Path) -> None:
    first = _new(tmp_path / "a.key")
    second = _new(tmp_path / "b")
    assert first != second
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.key", "a.pub", "b", "b.pub"]
    assert done(cli("pki", "plan-key", "show", str(tmp_path / "b.pub")), rf"({KEY_ID})\n")[1] == second


@pytest.mark.parametrize("existing", ["ops.key", "ops.pub"])
def test_new_never_overwrites_a_key_file(tmp_path: Path, existing: str) -> None:
    _new(tmp_path / "ops.key")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    if existing == "ops.key":
        line = refused(cli("pki", "plan-key", "new", str(tmp_path / "ops.key")), 2)
    else:
        (tmp_path / "ops.key").rename(tmp_path / "moved.key")
        before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
        line = refused(cli("pki", "plan-key", "new", str(tmp_path / "ops.key")), 2)
    assert line == f"qinglong: {tmp_path / existing} exists: a key file is never overwritten"
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before, "nothing changed, byte for byte"


def test_new_into_a_missing_folder_or_named_pub_is_one_line(tmp_path: Path) -> None:
    refused(cli("pki", "plan-key", "new", str(tmp_path / "missing" / "ops.key")), 2, "cannot create", "missing")
    refused(cli("pki", "plan-key", "new", str(tmp_path / "ops.pub")), 2, "must not end in .pub")
    assert list(tmp_path.iterdir()) == []


def test_a_bad_file_is_one_line_exit_2_without_a_traceback(tmp_path: Path) -> None:
    _new(tmp_path / "ops.key")
    secret_lines = [ln for ln in (tmp_path / "ops.key").read_text().splitlines() if not ln.startswith("-----")]
    garbage = tmp_path / "garbage.key"
    garbage.write_bytes(b"-----BEGIN PRIVATE KEY-----\nnot base64 at all\n-----END PRIVATE KEY-----\n")
    garbage.chmod(0o600)
    bad_pub = tmp_path / "bad.pub"
    bad_pub.write_bytes(b"\x00\x01 not a key\n")
    bad_pub.chmod(0o644)
    truncated = tmp_path / "cut.key"
    truncated.write_bytes((tmp_path / "ops.key").read_bytes()[:-30])
    truncated.chmod(0o600)
    ec_key = tmp_path / "ec.key"
    ec_key.write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    ec_key.chmod(0o600)
    open_key = tmp_path / "open.key"
    open_key.write_bytes((tmp_path / "ops.key").read_bytes())
    open_key.chmod(0o644)
    cases = {
        garbage: "not a PEM private key",
        bad_pub: "not a PEM public key",
        truncated: "not a PEM private key",
        ec_key: "holds a key of type EC, not an Ed25519 key",
        open_key: "a private key others may read (mode 0644): chmod 600 it",
        tmp_path / "missing.pub": "no such key file",
    }
    for path, says in cases.items():
        line = refused(cli("pki", "plan-key", "show", str(path)), 2)
        assert line == f"qinglong: {path}: {says}", line
        assert not any(secret in line for secret in secret_lines)
    if os.geteuid() != 0:  # root reads any file
        (tmp_path / "ops.key").chmod(0o000)
        refused(cli("pki", "plan-key", "show", str(tmp_path / "ops.key")), 2, "cannot read the key file")


def test_usage_errors_are_one_line() -> None:
    assert refused(cli("pki", "plan-key", "new"), 2).endswith("(see --help)")
    assert refused(cli("pki", "plan-key", "show"), 2).endswith("(see --help)")
    assert refused(cli("pki", "plan-key"), 2).endswith("(see --help)")


def test_the_help_says_how_to_rotate() -> None:
    for command in (("pki", "plan-key"), ("pki", "plan-key", "new")):
        out = cli(*command, "--help")
        assert out.code == 0 and out.stderr == "", out
        text = " ".join(out.stdout.split())
        assert "make a new key, add its .pub to every Worker's trusted keys" in text, text
        assert "then remove the old .pub" in text, text
    assert cli("pki", "plan-key", "show", "--help").code == 0
