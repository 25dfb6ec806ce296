"""shell.toml's connection budgets (qinglong.shell.config): each listener's defaults when its keys are
absent, overrides per listener, one-line errors naming the key for unknown keys, wrong types and values
out of range, no TLS budget on the plain-HTTP admin listener, and the documentation in step with the code
(the defaults table of docs/operations.md and both shell.toml examples parse with the same engine).
Touches: files under tmp_path; reads docs/operations.md.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path

import pytest

from qinglong.shell import config as shell_config
from qinglong.shell.config import BUDGET_KEYS, BUDGETS, TLS_ONLY, ConfigError, load

REPO = Path(__file__).resolve().parents[3]
OPERATIONS = REPO / "docs" / "operations.md"


def _write(folder: Path, worker: str = "", user: str = "", admin: str = "") -> Path:
    for name in ("server.crt", "server.key", "ca.crt"):
        (folder / name).write_text("x")
    secret = folder / "cluster.secret"
    secret.write_bytes(b"s" * 32)
    secret.chmod(0o600)
    path = folder / "shell.toml"
    path.write_text(
        '[database]\ndsn = "host=127.0.0.1"\n\n[secret]\ncluster_secret_file = "cluster.secret"\n\n'
        '[worker_listener]\nhost = "127.0.0.1"\nport = 8443\ncertificate = "server.crt"\nkey = "server.key"\n'
        f'client_ca = "ca.crt"\n{worker}\n'
        f'[user_listener]\nhost = "127.0.0.1"\nport = 9443\ncertificate = "server.crt"\nkey = "server.key"\n{user}\n'
        f'[admin_listener]\nhost = "127.0.0.1"\nport = 9100\n{admin}'
    )
    return path


def test_absent_keys_take_each_listeners_defaults(tmp_path: Path) -> None:
    config = load(_write(tmp_path))
    assert config.worker.budget == BUDGETS["worker_listener"]
    assert config.user.budget == BUDGETS["user_listener"]
    assert config.admin.budget == BUDGETS["admin_listener"]
    assert config.worker.budget != config.user.budget  # each listener has its own


def test_keys_override_one_listener_only(tmp_path: Path) -> None:
    config = load(_write(tmp_path, user="max_connections = 7\nidle_timeout = 2\nmax_header_bytes = 4096\n"))
    assert config.user.budget == dataclasses.replace(
        BUDGETS["user_listener"], max_connections=7, idle_timeout=2.0, max_header_bytes=4096
    )
    assert config.worker.budget == BUDGETS["worker_listener"]


@pytest.mark.parametrize(
    ("section", "line", "says"),
    [
        ("worker", "max_conections = 5", "shell.toml.worker_listener: unknown field 'max_conections'"),
        ("worker", "max_connections = 0", "shell.toml.worker_listener.max_connections: outside 1..100000"),
        ("user", 'max_connections = "5"', "shell.toml.user_listener.max_connections: expected an integer"),
        ("user", "tls_handshake_timeout = 0", "shell.toml.user_listener.tls_handshake_timeout: outside 0.1..300"),
        ("user", "tls_handshake_timeout = true", "tls_handshake_timeout: expected a number of seconds"),
        ("worker", "header_timeout = 301", "shell.toml.worker_listener.header_timeout: outside 0.1..300 seconds"),
        ("worker", 'header_timeout = "10s"', "shell.toml.worker_listener.header_timeout: expected a number"),
        ("user", "body_timeout = -1", "shell.toml.user_listener.body_timeout: outside 0.1..3600 seconds"),
        ("user", "body_timeout = nan", "shell.toml.user_listener.body_timeout: expected a number of seconds"),
        ("admin", "idle_timeout = 3601", "shell.toml.admin_listener.idle_timeout: outside 0.1..3600 seconds"),
        ("admin", "idle_timeout = [1]", "shell.toml.admin_listener.idle_timeout: expected a number of seconds"),
        ("worker", "max_header_count = 0", "shell.toml.worker_listener.max_header_count: outside 1..1024"),
        ("worker", "max_header_count = 8.0", "shell.toml.worker_listener.max_header_count: expected an integer"),
        ("user", "max_header_bytes = 1023", "shell.toml.user_listener.max_header_bytes: outside 1024..1048576"),
        ("user", "max_header_bytes = 1e4", "shell.toml.user_listener.max_header_bytes: expected an integer"),
        ("admin", "tls_handshake_timeout = 5", "[admin_listener] tls_handshake_timeout: the admin listener is plain"),
    ],
)
def test_a_bad_budget_is_one_line_naming_the_key(tmp_path: Path, section: str, line: str, says: str) -> None:
    path = _write(tmp_path, **{section: line + "\n"})
    with pytest.raises(ConfigError) as caught:
        load(path)
    message = str(caught.value)
    assert says in message and "\n" not in message, message


def _documented_defaults() -> dict[str, dict[str, str]]:
    """The table under "Connection budgets" in docs/operations.md: key → {listener section: cell}."""
    section = OPERATIONS.read_text().split("### Connection budgets", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    table: dict[str, dict[str, str]] = {}
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        key = cells[0].strip("`")
        table[key] = dict(zip(("worker_listener", "user_listener", "admin_listener"), cells[1:4], strict=True))
    return table


def test_the_operations_guide_states_the_defaults_of_the_code() -> None:
    table = _documented_defaults()
    assert set(table) == set(BUDGET_KEYS)
    for key, cells in table.items():
        for section, cell in cells.items():
            value = getattr(BUDGETS[section], key)
            if section == "admin_listener" and key in TLS_ONLY:
                assert cell == "—", cell
                continue
            shown = f"{value:g} s" if isinstance(value, float) else str(value)
            assert cell == shown, (key, section, cell, shown)


def _toml_blocks() -> list[tuple[str, str]]:
    doc = shell_config.__doc__ or ""
    example = "\n".join(line[4:] for line in doc.splitlines() if line.startswith("    "))
    guide = OPERATIONS.read_text().split("### The shell:", 1)[1]
    fenced = re.search(r"```toml\n(.*?)```", guide, re.S)
    assert fenced is not None
    return [("config.py docstring", example), ("docs/operations.md", fenced[1])]


@pytest.mark.parametrize("where", ["config.py docstring", "docs/operations.md"])
def test_both_shell_toml_examples_parse_and_show_every_budget_key(where: str) -> None:
    text = dict(_toml_blocks())[where]
    parsed = shell_config._ShellFile.load_at(tomllib.loads(text), "shell.toml")
    shown = {key for key in BUDGET_KEYS if getattr(parsed.worker_listener, key) is not None}
    assert shown == set(BUDGET_KEYS), where
