"""The operator CLI's secret commands, run as an operator runs them (child processes; the helpers are test_cli's
and test_cli_hand's): `secret set` reads a value of any bytes from standard input, a file or a terminal (not
echoed), never from the command line, makes version 1, 2, … of it (the shell seals exactly those bytes) and never
prints it; `secret list` shows names, versions, sizes, who and when, never a value (--json too); `secret delete`
removes one, and deleting a missing one is a one-line refusal; bad input (a bad name, an empty value, one over
64 KiB, a missing --from-file, a closed standard input) is one line and exit 2 before anything reaches the shell,
and a role that may not write secrets is refused (403 denied) with nothing changed; `secret keygen` writes a new
0600 key file the shell's own loader accepts (and seals with), and never replaces a file or follows a symlink.

Touches: the session cluster (a fresh database per test), temporary folders (token, value and key files), the
in-process shell on loopback (its [secrets] key), child processes, a pseudo-terminal.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Final

import pytest

from qinglong.cli.__main__ import parser
from qinglong.shell.config import load as load_shell_config
from qinglong.shell.db import Database as ShellDatabase
from qinglong.shell.sealing import Sealer, kek_id, read_kek
from qinglong.wire.common import SECRET_VALUE_MAX_BYTES
from qinglong.worker.masking import MIN_MASKED_BYTES
from tests.conftest import Database
from tests.integration.cli.test_cli import (
    UNREACHABLE_API,
    Out,
    _api_args,
    _env,
    _token_file,
    cli,
    done,
    mode,
    ql_text,
    refused,
    rows,
)
from tests.integration.cli.test_cli_hand import _parsers, acli
from tests.integration.shell import conftest as shell_conftest
from tests.integration.shell.conftest import Pki, Seed, Shell, image_diff, ql_image, serve_shell
from tests.integration.shell.test_project_secrets import (
    _shell_toml,
    add_writers,
    opened,
    subject_name,
    version_rows,
)

pki = shell_conftest.pki
seed = shell_conftest.seed
shell = shell_conftest.shell

db = pytest.mark.db

NAME: Final = "API_TOKEN"
KEY_ID: Final = r"[A-Za-z0-9_-]{12}"
SHORT_WARNING: Final = f"warning: a value shorter than {MIN_MASKED_BYTES} bytes is not masked in output\n"
CLOSED: Final = None  # standard input closed, as `<&-` leaves it


async def fed(*args: str, stdin: bytes | None) -> tuple[Out, bytes]:
    """`acli` with `stdin` on the child's standard input (CLOSED: none at all), and the raw bytes the child wrote
    on stdout and stderr, where a value is looked for."""
    command = (sys.executable, "-m", "qinglong.cli", *args)
    if stdin is CLOSED:
        command = ("bash", "-c", 'exec "$@" <&-', "bash", *command)
    proc = await asyncio.create_subprocess_exec(
        *command, stdin=asyncio.subprocess.PIPE if stdin is not None else None,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_env(),
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(stdin), 120)
    assert proc.returncode is not None
    return Out(proc.returncode, out.decode(), err.decode()), out + err


def shown_anywhere(value: bytes, raw: bytes) -> bool:
    """Whether `raw` holds the value, its hexadecimal or its base64 (the form the CLI sends it in)."""
    forms = (value, value.hex().encode(), base64.b64encode(value), base64.b64encode(value).rstrip(b"="))
    return any(form in raw for form in forms)


def secret_tables(dsn: str) -> list[tuple[Any, ...]]:
    """Every row of ql.secrets and ql.secret_versions, as text: equal lists mean no secret changed."""
    return rows(
        dsn,
        "select 'secrets', s::text from ql.secrets s union all select 'secret_versions', v::text"
        " from ql.secret_versions v order by 1, 2",
    )


def owner_api(
    shell: Shell, pki: Pki, dsn: str, seed: Seed, tmp_path: Path, project: str = "project-p"
) -> tuple[str, ...]:
    """The user-API flags of a new owner of Project P (secret.write: owner and admin; the seeded operator has not)."""
    owner = add_writers(dsn, seed.project_p).owner
    return _api_args(shell, pki, _token_file(tmp_path, "owner", owner.token), project)


def a_value(tag: str, size: int = 48) -> bytes:
    """Binary bytes (a NUL, 0xff, a CR, newlines, a trailing newline the CLI must keep), recognisable by `tag`."""
    head = b"\x00\xff\r\n" + f"cli-{tag}-".encode() + os.urandom(16)
    return head + os.urandom(max(0, size - len(head) - 1)) + b"\n"


# -- set ---------------------------------------------------------------------------------------------------------


@db
async def test_set_makes_a_new_version_each_time_from_stdin_or_a_file_and_never_prints_the_value(
    shell: Shell, seed: Seed, pki: Pki, database: Database, tmp_path: Path
) -> None:
    dsn = database.dsn()
    api = owner_api(shell, pki, dsn, seed, tmp_path)
    first, second, third = a_value("first"), a_value("second", 300), os.urandom(SECRET_VALUE_MAX_BYTES)
    value_file = tmp_path / "value.bin"
    value_file.write_bytes(third)

    out, raw = await fed("secret", "set", *api, NAME, stdin=first)
    done(out, rf"secret {NAME}: version 1 \({len(first)} bytes, set\)\n")
    assert not shown_anywhere(first, raw)
    out, raw = await fed("secret", "set", *api, NAME, stdin=second)
    done(out, rf"secret {NAME}: version 2 \(300 bytes, set\)\n")
    assert not shown_anywhere(second, raw)
    out, raw = await fed("secret", "set", *api, NAME, "--from-file", str(value_file), "--json", stdin=b"")
    answer = json.loads(done(out, r"(?s)\{.*\}\n")[0])
    assert {k: v for k, v in answer.items() if k != "setAtMs"} == {
        "schema": "qinglong/secret@v1", "status": "set", "name": NAME, "version": 3, "size": SECRET_VALUE_MAX_BYTES,
    }  # fmt: skip
    assert not shown_anywhere(third, raw) and not shown_anywhere(third[:64], raw)

    # The shell sealed exactly the bytes given (the NUL, the 0xff, the trailing newline), version after version.
    versions = version_rows(dsn)
    assert [(r.name, r.version, r.size) for r in versions] == [
        (NAME, 1, len(first)), (NAME, 2, 300), (NAME, 3, SECRET_VALUE_MAX_BYTES)
    ]  # fmt: skip
    assert [r.sealed is None for r in versions] == [True, True, False], "earlier versions are destroyed by a set"
    assert shell.sealer is not None and opened(shell.sealer, versions[-1]) == third
    stored = ql_text(dsn)
    assert all(not shown_anywhere(v[:40], stored.encode()) for v in (first, second, third)), "ciphertext only"


@db
async def test_set_keeps_every_byte_and_warns_of_a_value_too_short_to_mask(
    shell: Shell, seed: Seed, pki: Pki, database: Database, tmp_path: Path
) -> None:
    dsn = database.dsn()
    api = owner_api(shell, pki, dsn, seed, tmp_path, seed.project_p)
    short = b"\x00\xff\n"
    out, raw = await fed("secret", "set", *api, "SHORT", stdin=short)
    assert (out.code, out.stdout, out.stderr) == (0, "secret SHORT: version 1 (3 bytes, set)\n", SHORT_WARNING), out
    assert short not in raw
    [row] = version_rows(dsn)
    assert shell.sealer is not None and opened(shell.sealer, row) == short


@db
async def test_set_reads_a_terminal_without_echo(
    shell: Shell, seed: Seed, pki: Pki, database: Database, tmp_path: Path
) -> None:
    """At a terminal the CLI asks for the value (on stderr) and turns the terminal's echo off: the typed value never
    comes back on the terminal, nor on stdout or stderr. (A new session: the child has no controlling terminal, so
    it is the pseudo-terminal on its standard input that it asks.)"""
    dsn = database.dsn()
    api = owner_api(shell, pki, dsn, seed, tmp_path)
    value = f"typed-{os.urandom(12).hex()}".encode()
    master, slave = os.openpty()
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "qinglong.cli", "secret", "set", *api, NAME,
            stdin=slave, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_env(),
            start_new_session=True,
        )  # fmt: skip
        os.close(slave)
        slave = -1
        assert proc.stderr is not None and proc.stdout is not None
        prompt = await asyncio.wait_for(proc.stderr.readuntil(b"(not echoed): "), 60)
        assert prompt == f"value of {NAME} (not echoed): ".encode(), prompt
        os.write(master, value + b"\n")  # typed only once echo is off: the prompt follows tcsetattr
        out, rest = await asyncio.wait_for(asyncio.gather(proc.stdout.read(), proc.stderr.read()), 60)
        assert await asyncio.wait_for(proc.wait(), 60) == 0, (out, rest)
        echoed = _drain(master)
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)
    assert (out, rest) == (f"secret {NAME}: version 1 ({len(value)} bytes, set)\n".encode(), b"\n"), (out, rest)
    assert value not in echoed, echoed
    [row] = version_rows(dsn)
    assert shell.sealer is not None and opened(shell.sealer, row) == value, "one line, without its newline"


def _drain(master: int) -> bytes:
    """What the pseudo-terminal's master side holds (what the terminal would show), without waiting."""
    os.set_blocking(master, False)
    chunks: list[bytes] = []
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # nothing more (EAGAIN), or the slave side is closed (EIO)
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def test_no_option_of_secret_set_takes_a_value() -> None:
    """The value is never on the command line (ps, the shell's history): only the name and --from-file's path."""
    found = dict(_parsers(parser()))["qinglong secret set"]
    options = {o for a in found._actions for o in a.option_strings}
    assert options == {"-h", "--help", "--api", "--ca", "--token-file", "--project", "--json", "--from-file"}
    assert [a.dest for a in found._actions if not a.option_strings] == ["name"]
    line = refused(cli("secret", "set", "--api", UNREACHABLE_API, "--project", "p", NAME, "--value", "v"), 2)
    assert "unrecognized arguments" in line and line.endswith("(see --help)"), line


# -- list ------------------------------------------------------------------------------------------------------


@db
async def test_list_shows_names_versions_sizes_who_and_when_never_a_value(
    shell: Shell, seed: Seed, pki: Pki, database: Database, tmp_path: Path
) -> None:
    dsn = database.dsn()
    writers = add_writers(dsn, seed.project_p)
    owner = _api_args(shell, pki, _token_file(tmp_path, "owner", writers.owner.token), "project-p")
    admin = _api_args(shell, pki, _token_file(tmp_path, "admin", writers.admin.token), seed.project_p)
    viewer = _api_args(shell, pki, _token_file(tmp_path, "viewer", seed.viewer.token), "project-p")
    cookie, token, token2 = a_value("cookie", 100), a_value("token"), a_value("token-2", 70)
    started_ms = int(time.time() * 1000)
    for api, name, value in ((owner, "COOKIE", cookie), (owner, NAME, token), (admin, NAME, token2)):
        done((await fed("secret", "set", *api, name, stdin=value))[0], rf"secret {name}: version \d \(.*\)\n")
    ended_ms = int(time.time() * 1000)
    owner_name, admin_name = subject_name(dsn, writers.owner), subject_name(dsn, writers.admin)

    out, raw = await fed("secret", "list", *viewer, stdin=b"")  # every role reads the list
    header, *lines = done(out, r"(?s).*\n")[0].splitlines()
    assert header.split() == ["NAME", "VERSION", "BYTES", "SET", "BY", "SET", "AT", "(UTC)"], header
    cells = [re.fullmatch(r"(\S+) +(\d+) +(\d+) +(\S+) +(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", line) for line in lines]
    assert all(cells), lines
    listed = [m.groups()[:4] for m in cells if m]
    assert listed == [(NAME, "2", "70", admin_name), ("COOKIE", "1", "100", owner_name)], lines  # by name
    at = rows(
        dsn,
        "select s.name, v.created_at_ms from ql.secrets s join ql.secret_versions v"
        " on v.secret_id = s.id and v.version = s.current_version order by s.name",
    )
    shown_at = [time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) for _, ms in at]
    assert [m.group(5) for m in cells if m] == shown_at
    assert all(started_ms - 1000 <= ms <= ended_ms + 1000 for _, ms in at), (started_ms, at, ended_ms)
    assert not any(shown_anywhere(v, raw) for v in (cookie, token, token2))

    out, raw = await fed("secret", "list", *owner, "--json", stdin=b"")
    document = json.loads(done(out, r"(?s)\{.*\}\n")[0])
    assert (document["status"], document["projectId"], document["project"]) == ("listed", seed.project_p, "project-p")
    assert [{k: s[k] for k in ("name", "version", "size", "setBy")} for s in document["secrets"]] == [
        {"name": NAME, "version": 2, "size": 70, "setBy": admin_name},
        {"name": "COOKIE", "version": 1, "size": 100, "setBy": owner_name},
    ]
    assert all(set(s) == {"name", "version", "size", "setBy", "setAtMs", "createdAtMs"} for s in document["secrets"])
    assert not any(shown_anywhere(v, raw) for v in (cookie, token, token2))


# -- delete ----------------------------------------------------------------------------------------------------


@db
async def test_delete_removes_a_secret_and_a_missing_one_is_a_one_line_refusal(
    shell: Shell, seed: Seed, pki: Pki, database: Database, tmp_path: Path
) -> None:
    dsn = database.dsn()
    api = owner_api(shell, pki, dsn, seed, tmp_path)
    done((await fed("secret", "set", *api, NAME, stdin=a_value("d")))[0], rf"secret {NAME}: version 1 \(.*\)\n")
    done((await fed("secret", "set", *api, "KEPT", stdin=a_value("k")))[0], r"secret KEPT: version 1 \(.*\)\n")

    done(await acli("secret", "delete", *api, NAME), rf"secret {NAME}: deleted\n")
    assert rows(dsn, "select name, current_version from ql.secrets order by name") == [(NAME, 0), ("KEPT", 1)]
    assert [(r.name, r.sealed is None) for r in version_rows(dsn)] == [(NAME, True), ("KEPT", False)]
    listed = done(await acli("secret", "list", *api), r"(?s).*\n")[0].splitlines()
    assert [line.split()[0] for line in listed[1:]] == ["KEPT"], listed

    again = json.loads(done(await acli("secret", "delete", *api, NAME, "--json"), r"(?s)\{.*\}\n")[0])
    assert again == {"schema": "qinglong/secret@v1", "status": "already_deleted", "name": NAME}, again

    before = secret_tables(dsn)
    assert refused(await acli("secret", "delete", *api, "NEVER_SET"), 2) == (
        "qinglong: no secret NEVER_SET in project project-p (`secret list` lists them)"
    )
    assert secret_tables(dsn) == before


# -- bad input: one line, exit 2, nothing reaches the shell ----------------------------------------------------


OVER: Final = b"y" * (SECRET_VALUE_MAX_BYTES + 1)


@db
@pytest.mark.parametrize(
    ("command", "stdin", "file", "expected"),
    [
        pytest.param(("set", "lower"), b"value-1234", None, "argument NAME: a secret's name", id="lower-case name"),
        pytest.param(("set", "1ABC"), b"value-1234", None, "argument NAME: a secret's name", id="leading digit"),
        pytest.param(("set", "A" * 65), b"value-1234", None, "argument NAME: a secret's name", id="65 characters"),
        pytest.param(("set", "DB-PASSWORD"), b"value-1234", None, "argument NAME: a secret's name", id="hyphen"),
        pytest.param(("delete", "lower"), None, None, "argument NAME: a secret's name", id="delete, lower-case name"),
        pytest.param(("set", NAME), b"", None, "qinglong: the value is empty", id="empty stdin"),
        pytest.param(("set", NAME), b"ignored", b"", "qinglong: the value is empty", id="empty file"),
        pytest.param(("set", NAME), OVER, None, "qinglong: the value is longer than 65536 bytes", id="over 64 KiB"),
        pytest.param(("set", NAME), b"", OVER, "qinglong: the value is longer than 65536 bytes", id="file over 64 KiB"),
        pytest.param(("set", NAME), b"value-1234", "missing", "No such file or directory", id="from-file missing"),
        pytest.param(("set", NAME), b"value-1234", "folder", "Is a directory", id="from-file a folder"),
        pytest.param(("set", NAME), CLOSED, None, "qinglong: no value: standard input is closed", id="stdin closed"),
    ],
)
async def test_bad_input_is_one_line_exit_2_and_changes_nothing(
    shell: Shell, seed: Seed, pki: Pki, database: Database, tmp_path: Path,
    command: tuple[str, str], stdin: bytes | None, file: bytes | str | None, expected: str,
) -> None:  # fmt: skip
    dsn = database.dsn()
    api = owner_api(shell, pki, dsn, seed, tmp_path)
    done((await fed("secret", "set", *api, "KEPT", stdin=a_value("k")))[0], r"secret KEPT: version 1 \(.*\)\n")
    options: tuple[str, ...] = ()
    if file is not None:
        path = tmp_path / "value.bin"
        if isinstance(file, bytes):
            path.write_bytes(file)
        elif file == "folder":
            path.mkdir()
        options = ("--from-file", str(path))
        expected = expected if isinstance(file, bytes) else f"qinglong: cannot read {path}: {expected}"
    before, tables = ql_text(dsn), secret_tables(dsn)
    verb, name = command
    out, raw = await fed("secret", verb, *api, name, *options, stdin=stdin)
    line = refused(out, 2, expected)
    if expected.startswith("argument"):
        assert line.endswith("(see --help)"), line
    if stdin:
        assert stdin[:16] not in raw
    assert secret_tables(dsn) == tables
    assert ql_text(dsn) == before, "nothing reached the shell: not even an audit row"


# -- roles -----------------------------------------------------------------------------------------------------


@db
async def test_a_role_that_may_not_write_secrets_is_refused_and_changes_nothing(
    shell: Shell, seed: Seed, pki: Pki, database: Database, tmp_path: Path
) -> None:
    dsn = database.dsn()
    owner = owner_api(shell, pki, dsn, seed, tmp_path)
    done((await fed("secret", "set", *owner, NAME, stdin=a_value("o")))[0], rf"secret {NAME}: version 1 \(.*\)\n")
    listed = done(await acli("secret", "list", *owner), r"(?s).*\n")[0]
    before, image = secret_tables(dsn), await ql_image(dsn)
    value = a_value("denied")
    for subject in (seed.viewer, seed.operator):
        api = _api_args(shell, pki, _token_file(tmp_path, "other", subject.token), "project-p")
        out, raw = await fed("secret", "set", *api, NAME, stdin=value)
        denied = "refused (403 denied): your role there does not allow it: an owner or admin can grant one"
        assert denied in refused(out, 2) and not shown_anywhere(value, raw)
        assert denied in refused(await acli("secret", "delete", *api, NAME), 2)
    # A project the owner has no role in is not found, not forbidden.
    elsewhere = (*owner[:-1], seed.project_q)
    out, raw = await fed("secret", "set", *elsewhere, NAME, stdin=value)
    assert refused(out, 2).startswith(f"qinglong: no project '{seed.project_q}'") and not shown_anywhere(value, raw)

    assert secret_tables(dsn) == before
    # the refusals' audit rows, and the listing of the Projects the owner may read that the last refusal names
    assert image_diff(image, await ql_image(dsn)) == {"security_audit": 6}, "only audit rows"
    assert done(await acli("secret", "list", *owner), r"(?s).*\n")[0] == listed


# -- keygen ----------------------------------------------------------------------------------------------------


def test_keygen_writes_a_0600_key_file_the_shells_loader_reads(tmp_path: Path) -> None:
    path = tmp_path / "secrets.kek"
    out = cli("secret", "keygen", "--out", str(path))
    shown = done(out, rf"{re.escape(str(path))}: key ({KEY_ID}) \(mode 0600\)\n")[1]
    assert mode(path) == 0o600, oct(mode(path))
    text = path.read_text()
    assert re.fullmatch(r"[0-9a-f]{64}\n", text), "64 hexadecimal characters and a newline"
    key = read_kek(path)
    assert key == bytes.fromhex(text) and kek_id(key) == shown
    assert text.strip() not in out.stdout + out.stderr, "the key goes to its file only"

    other = tmp_path / "other.kek"
    done(cli("secret", "keygen", "--out", str(other)), r".*\n")
    assert read_kek(other) != key, "a fresh key each time"


@pytest.mark.parametrize("existing", ["file", "symlink to a file", "dangling symlink"])
def test_keygen_never_replaces_a_file_nor_follows_a_symlink(tmp_path: Path, existing: str) -> None:
    old = tmp_path / "old.kek"
    old.write_bytes(b"0123456789abcdef" * 4 + b"\n")
    old.chmod(0o644)
    path = {"file": old, "symlink to a file": tmp_path / "link.kek", "dangling symlink": tmp_path / "dangling.kek"}[
        existing
    ]
    if existing == "symlink to a file":
        path.symlink_to(old)
    elif existing == "dangling symlink":
        path.symlink_to(tmp_path / "nowhere.kek")
    before = {p.name: (p.is_symlink(), p.read_bytes() if p.exists() else None) for p in tmp_path.iterdir()}

    out = cli("secret", "keygen", "--out", str(path))
    assert refused(out, 2) == f"qinglong: {path} exists: a key file is never overwritten"
    after = {p.name: (p.is_symlink(), p.read_bytes() if p.exists() else None) for p in tmp_path.iterdir()}
    assert after == before, "byte for byte, and no file made through the link"
    assert mode(old) == 0o644


def test_keygen_without_out_or_into_a_missing_folder_is_one_line(tmp_path: Path) -> None:
    assert refused(cli("secret", "keygen"), 2, "--out").endswith("(see --help)")
    missing = tmp_path / "no" / "such.kek"
    out = cli("secret", "keygen", "--out", str(missing))
    assert refused(out, 2) == f"qinglong: cannot create {missing}: No such file or directory"
    assert list(tmp_path.iterdir()) == []


@db
async def test_a_keygen_key_named_by_shell_toml_seals_what_the_cli_sets(
    pki: Pki, seed: Seed, database: Database, tmp_path: Path
) -> None:
    """keygen → [secrets] kek_file → the shell's config loader → a shell sealing under it, end to end."""
    shown = done(cli("secret", "keygen", "--out", str(tmp_path / "made.kek")), rf".*: key ({KEY_ID}) .*\n")[1]
    toml = _shell_toml(tmp_path, pki, database.runtime_dsn, (0, 0, 0), '[secrets]\nkek_file = "made.kek"')
    config = load_shell_config(toml)
    assert config.kek is not None
    sealer = Sealer(config.kek, config.accepted_keks)
    assert sealer.current_id == shown
    dsn = database.dsn()
    async with serve_shell(ShellDatabase(database.runtime_dsn), pki, sealer=sealer) as keyed:
        api = owner_api(keyed, pki, dsn, seed, tmp_path)
        value = a_value("kek")
        done((await fed("secret", "set", *api, NAME, stdin=value))[0], rf"secret {NAME}: version 1 \(.*\)\n")
    [row] = version_rows(dsn)
    assert row.kek_id == shown and opened(Sealer(read_kek(tmp_path / "made.kek")), row) == value
