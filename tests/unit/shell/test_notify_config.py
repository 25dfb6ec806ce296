"""notify.toml read exactly (qinglong.shell.notify.load): the defaults, the shell's key files with their checks, and
the refusals each named in one line. Touches: a temporary folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from qinglong.shell.config import ConfigError
from qinglong.shell.notify import load
from qinglong.shell.sealing import new_kek


def write(folder: Path, dispatch: str = "", kek_mode: int = 0o600) -> Path:
    (folder / "secrets.kek").write_text(new_kek())
    (folder / "secrets.kek").chmod(kek_mode)
    path = folder / "notify.toml"
    path.write_text(f'[database]\ndsn = "user=ql_notify"\n\n[secrets]\nkek_file = "secrets.kek"\n{dispatch}')
    return path


def test_defaults_and_the_key_file(tmp_path: Path) -> None:
    config = load(write(tmp_path))
    assert (config.batch, config.concurrency, config.lease, config.timeout, config.poll) == (16, 8, 60.0, 10.0, 1.0)
    assert config.wecom_url.startswith("https://qyapi.weixin.qq.com/") and len(config.kek) == 32
    assert config.loopback_receivers is False, "a receiver on this host is refused unless allowed"
    assert config.kek.hex() not in repr(config), "no key bytes in a repr"


@pytest.mark.parametrize(
    ("dispatch", "says"),
    [
        ("\n[dispatch]\nlease = 5.0\ntimeout = 10.0\n", "lease must be at least twice timeout"),
        ("\n[dispatch]\nbatch = 0\n", "batch"),
        ("\n[dispatch]\nretries = 3\n", "retries"),
        ('\n[dispatch]\nca_file = "missing.pem"\n', "ca_file"),
        ('\n[dispatch]\nwecom_url = "ftp://x.example/y"\n', "wecom_url"),
        ('\n[dispatch]\nloopback_receivers = "yes"\n', "loopback_receivers"),
    ],
)
def test_refusals_name_what_is_wrong(tmp_path: Path, dispatch: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        load(write(tmp_path, dispatch))


def test_a_key_file_others_can_read_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="chmod 600"):
        load(write(tmp_path, kek_mode=0o640))
