"""shell.toml's [secret] section (qinglong.shell.config): the current cluster secret and the optional one a
rotation still (or already) accepts, each ≥ 32 bytes and mode 0600, never the same secret twice; every
refusal one line naming the file. Touches: files under tmp_path.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from qinglong.shell.config import ConfigError, load


def _write(folder: Path, secrets: dict[str, bytes], section: str) -> Path:
    for name in ("server.crt", "server.key", "ca.crt"):
        (folder / name).write_text("x")
    for name, value in secrets.items():
        (folder / name).write_bytes(value)
        (folder / name).chmod(0o600)
    path = folder / "shell.toml"
    path.write_text(
        f'[database]\ndsn = "host=127.0.0.1"\n\n[secret]\n{section}\n\n'
        '[worker_listener]\nhost = "127.0.0.1"\nport = 8443\ncertificate = "server.crt"\nkey = "server.key"\n'
        'client_ca = "ca.crt"\n\n[user_listener]\nhost = "127.0.0.1"\nport = 9443\ncertificate = "server.crt"\n'
        'key = "server.key"\n'
    )
    return path


CURRENT = 'cluster_secret_file = "new.secret"'
BOTH = CURRENT + '\naccepted_secret_file = "old.secret"'


def test_the_accepted_secret_is_optional_and_read_beside_the_current_one(tmp_path: Path) -> None:
    only = load(_write(tmp_path, {"new.secret": b"n" * 32 + b"\n"}, CURRENT))
    assert (only.cluster_secret, only.accepted_secret) == (b"n" * 32, None)
    both = load(_write(tmp_path, {"old.secret": b"o" * 40}, BOTH))
    assert (both.cluster_secret, both.accepted_secret) == (b"n" * 32, b"o" * 40)


@pytest.mark.parametrize(
    ("old", "mode", "message"),
    [
        (b"o" * 31, 0o600, r"^the cluster secret .*/old\.secret must hold at least 32 bytes$"),
        (b"o" * 32, 0o640, r"^.*/old\.secret must not be readable by group or others \(chmod 600\)$"),
        (b"n" * 32, 0o600, r"^\[secret\] accepted_secret_file holds the current cluster secret$"),
    ],
)
def test_a_bad_accepted_secret_is_one_line_naming_it(tmp_path: Path, old: bytes, mode: int, message: str) -> None:
    path = _write(tmp_path, {"new.secret": b"n" * 32, "old.secret": old}, BOTH)
    (tmp_path / "old.secret").chmod(mode)
    with pytest.raises(ConfigError, match=message):
        load(path)


def test_a_missing_accepted_secret_is_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path, {"new.secret": b"n" * 32}, BOTH)
    with pytest.raises(ConfigError, match=r"^cannot read the cluster secret .*/old\.secret: No such file"):
        load(path)
