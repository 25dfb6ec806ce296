"""shell.toml's [secrets] section (qinglong.shell.config): optional; kek_file (64 hexadecimal characters, mode
0600) is the key-encryption key every new secret value is sealed under, accepted_kek_files the keys a rotation
still opens; every refusal is one line naming the file, never its content; no key byte in a repr.
Touches: files under tmp_path.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from qinglong.shell.config import ConfigError, load
from qinglong.shell.sealing import Sealer, kek_id, new_kek

BASE = (
    '[database]\ndsn = "host=127.0.0.1"\n\n[secret]\ncluster_secret_file = "cluster.secret"\n\n{secrets}\n\n'
    '[worker_listener]\nhost = "127.0.0.1"\nport = 8443\ncertificate = "server.crt"\nkey = "server.key"\n'
    'client_ca = "ca.crt"\n\n[user_listener]\nhost = "127.0.0.1"\nport = 9443\ncertificate = "server.crt"\n'
    'key = "server.key"\n'
)


def _folder(folder: Path, keys: dict[str, str]) -> None:
    for name in ("server.crt", "server.key", "ca.crt"):
        (folder / name).write_text("x")
    (folder / "cluster.secret").write_bytes(b"c" * 32)
    (folder / "cluster.secret").chmod(0o600)
    for name, text in keys.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o600)


def _config(folder: Path, secrets: str) -> Path:
    path = folder / "shell.toml"
    path.write_text(BASE.format(secrets=secrets))
    return path


def test_without_a_secrets_section_the_shell_has_no_key(tmp_path: Path) -> None:
    _folder(tmp_path, {})
    config = load(_config(tmp_path, ""))
    assert (config.kek, config.accepted_keks) == (None, ())


def test_the_current_key_and_the_accepted_ones_are_read(tmp_path: Path) -> None:
    texts = {"new.kek": new_kek(), "old.kek": new_kek(), "older.kek": new_kek().upper()}
    _folder(tmp_path, texts)
    only = load(_config(tmp_path, '[secrets]\nkek_file = "new.kek"'))
    assert only.kek == bytes.fromhex(texts["new.kek"]) and only.accepted_keks == ()
    both = load(_config(tmp_path, '[secrets]\nkek_file = "new.kek"\naccepted_kek_files = ["old.kek", "older.kek"]'))
    assert both.accepted_keks == (bytes.fromhex(texts["old.kek"]), bytes.fromhex(texts["older.kek"]))
    assert both.kek is not None
    sealer = Sealer(both.kek, both.accepted_keks)
    assert sealer.current_id == kek_id(bytes.fromhex(texts["new.kek"])) and len(sealer.kek_ids) == 3
    shown = repr(both)
    assert all(text.strip().lower() not in shown.lower() for text in texts.values()) and "kek" not in shown
    assert "c" * 32 not in shown


@pytest.mark.parametrize(
    ("keys", "secrets", "message"),
    [
        ({}, '[secrets]\nkek_file = "new.kek"', r"^cannot read the key-encryption key .*/new\.kek: No such file"),
        ({"new.kek": "abc\n"}, '[secrets]\nkek_file = "new.kek"',
         r"^the key-encryption key .*/new\.kek must hold exactly 64 hexadecimal characters \(32 bytes\)$"),
        ({"new.kek": new_kek()}, '[secrets]\nkek_file = "new.kek"\naccepted_kek_files = ["gone.kek"]',
         r"^cannot read the key-encryption key .*/gone\.kek"),
        ({"new.kek": "ab" * 32}, '[secrets]\nkek_file = "new.kek"\naccepted_kek_files = ["new.kek"]',
         r"^\[secrets\] accepted_kek_files holds the key of kek_file, or one key twice$"),
        ({"new.kek": new_kek()}, "[secrets]", r"kek_file: missing"),
        ({"new.kek": new_kek()}, '[secrets]\nkek_file = "new.kek"\nkek = "00"', r"unknown field 'kek'"),
        ({"new.kek": new_kek()}, '[secrets]\nkek_file = "new.kek"\naccepted_kek_files = "old.kek"',
         r"accepted_kek_files: expected an array"),
    ],
)  # fmt: skip
def test_a_bad_secrets_section_is_one_line(tmp_path: Path, keys: dict[str, str], secrets: str, message: str) -> None:
    _folder(tmp_path, keys)
    with pytest.raises(ConfigError) as caught:
        load(_config(tmp_path, secrets))
    text = str(caught.value)
    assert len(text.splitlines()) == 1 and re.search(message, text), text
    assert all(key.strip() not in text for key in keys.values() if len(key.strip()) == 64)


def test_a_key_file_others_can_read_is_refused(tmp_path: Path) -> None:
    _folder(tmp_path, {"new.kek": new_kek()})
    (tmp_path / "new.kek").chmod(0o640)
    with pytest.raises(ConfigError, match=r"^.*/new\.kek must not be readable or writable by group or others"):
        load(_config(tmp_path, '[secrets]\nkek_file = "new.kek"'))
