"""shell.toml's [database] section (qinglong.shell.config): `prepared_statements` is true when absent (right for
a direct connection), takes only a TOML boolean (anything else is one line naming the key), and reaches the
pool that `Database.of` makes (psycopg's prepare_threshold None: never prepare). That the switch matters
behind pgbouncer is shown by tests/integration/test_pgbouncer.py.
Touches: files under tmp_path.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from qinglong.shell.config import ConfigError, load
from qinglong.shell.db import Database


def _write(folder: Path, database: str) -> Path:
    for name in ("server.crt", "server.key", "ca.crt"):
        (folder / name).write_text("x")
    secret = folder / "cluster.secret"
    secret.write_bytes(b"s" * 32)
    secret.chmod(0o600)
    path = folder / "shell.toml"
    path.write_text(
        f'[database]\ndsn = "host=127.0.0.1"\n{database}\n[secret]\ncluster_secret_file = "cluster.secret"\n\n'
        '[worker_listener]\nhost = "127.0.0.1"\nport = 8443\ncertificate = "server.crt"\nkey = "server.key"\n'
        'client_ca = "ca.crt"\n\n[user_listener]\nhost = "127.0.0.1"\nport = 9443\ncertificate = "server.crt"\n'
        'key = "server.key"\n'
    )
    return path


@pytest.mark.parametrize(
    ("line", "prepared"), [("", True), ("prepared_statements = true", True), ("prepared_statements = false", False)]
)
def test_prepared_statements_defaults_to_true_and_reaches_the_pool(tmp_path: Path, line: str, prepared: bool) -> None:
    config = load(_write(tmp_path, line))
    assert config.prepared_statements is prepared
    kwargs = Database.of(config)._pool.kwargs
    assert isinstance(kwargs, dict)
    assert ("prepare_threshold" in kwargs) is not prepared
    assert kwargs.get("prepare_threshold", 5) == (5 if prepared else None)


@pytest.mark.parametrize("value", ['"false"', "0", "1", '"no"', "[]"])
def test_prepared_statements_takes_only_a_boolean(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load(_write(tmp_path, f"prepared_statements = {value}"))
    message = str(refused.value)
    assert message == "shell.toml.database.prepared_statements: expected a boolean", message


def test_an_unknown_database_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"shell\.toml\.database: unknown field 'prepare_threshold'"):
        load(_write(tmp_path, "prepare_threshold = 0"))
