"""`qinglong secret`: set, list and delete a project's secrets through the user API (secret.write: owner and
admin; secret.read: every role), and make a key-encryption key file for the shell. A value is read from
standard input (without echo on a terminal) or a file, never from the command line, and is never printed.
Touches the shell (HTTPS), the CA and token files, the profile, the value's file and a new key file.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import TextIO

from qinglong.cli.common import Commands, Failure, api_options, group
from qinglong.cli.connect import UserScope, user_api
from qinglong.cli.printing import plural, table
from qinglong.wire.common import SECRET_NAME_PATTERN, SECRET_VALUE_MAX_BYTES
from qinglong.worker.masking import MIN_MASKED_BYTES


def _name(text: str) -> str:
    if not re.fullmatch(SECRET_NAME_PATTERN, text):
        raise argparse.ArgumentTypeError(f"a secret's name is an environment-variable name ({SECRET_NAME_PATTERN})")
    return text


def _value(args: argparse.Namespace) -> bytes:
    """The value: the file's bytes, or standard input's (a terminal: one line, not echoed)."""
    value: bytes
    stdin: TextIO | None = sys.stdin  # None when the command was started with its standard input closed (<&-)
    if args.from_file is not None:
        try:
            with args.from_file.open("rb") as f:
                value = f.read(SECRET_VALUE_MAX_BYTES + 1)
        except OSError as exc:
            raise Failure(f"cannot read {args.from_file}: {exc.strerror or exc}") from None
    elif stdin is None:
        raise Failure("no value: standard input is closed (pipe the value in, or pass --from-file)")
    elif stdin.isatty():
        value = getpass.getpass(f"value of {args.name} (not echoed): ").encode()
    else:
        value = stdin.buffer.read(SECRET_VALUE_MAX_BYTES + 1)
    if not value:
        raise Failure("the value is empty")
    if len(value) > SECRET_VALUE_MAX_BYTES:
        raise Failure(f"the value is longer than {SECRET_VALUE_MAX_BYTES} bytes")
    if len(value) < MIN_MASKED_BYTES:
        print(f"warning: a value shorter than {MIN_MASKED_BYTES} bytes is not masked in output", file=sys.stderr)
    return value


def set_secret(args: argparse.Namespace) -> int:
    value = _value(args)
    scope = UserScope(user_api(args), args.project)
    result = scope.call(f"secret set {args.name} in project {args.project}",
                        lambda p: scope.api.set_secret(p, args.name, value))  # fmt: skip
    text = (
        f"secret {result['name']}: version {result['version']} ({plural(result['size'], 'byte')}, {result['status']})"
    )
    print(json.dumps(result, indent=2) if args.json else text)
    return 0


def delete_secret(args: argparse.Namespace) -> int:
    scope = UserScope(user_api(args), args.project)
    result = scope.call(f"secret delete {args.name} in project {args.project}",
                        lambda p: scope.api.delete_secret(p, args.name),
                        f"no secret {args.name} in project {args.project} (`secret list` lists them)")  # fmt: skip
    print(json.dumps(result, indent=2) if args.json else f"secret {result['name']}: {result['status']}")
    return 0


def list_secrets(args: argparse.Namespace) -> int:
    scope = UserScope(user_api(args), args.project)
    listed = scope.call(f"secret list of project {args.project}", lambda p: scope.api.secrets(p))
    rows = [
        (
            s["name"],
            s["version"],
            s["size"],
            s["setBy"],
            time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(s["setAtMs"] / 1000)),
        )
        for s in listed["secrets"]
    ]
    print(
        json.dumps(listed, indent=2)
        if args.json
        else table(("NAME", "VERSION", "BYTES", "SET BY", "SET AT (UTC)"), rows)
    )
    return 0


def keygen(args: argparse.Namespace) -> int:
    from qinglong.shell.sealing import kek_id, new_kek

    text = new_kek()
    try:
        fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        raise Failure(f"{args.out} exists: a key file is never overwritten") from None
    except OSError as exc:
        raise Failure(f"cannot create {args.out}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "w") as f:
        f.write(text)
    print(f"{args.out}: key {kek_id(bytes.fromhex(text.strip()))} (mode 0600)")
    return 0


def register(top: Commands) -> None:
    secret = group(top, "secret", "project secrets, through the user API")
    p = secret.add_parser("set", help="set a secret's value (a new version), read from stdin or --from-file")
    api_options(p)
    p.add_argument("name", type=_name, metavar="NAME", help="the secret's name: [A-Z_][A-Z0-9_]{0,63}")
    p.add_argument("--from-file", type=Path, metavar="PATH", help="read the value (any bytes, ≤ 64 KiB) from this file "
                   "(default: standard input)")  # fmt: skip
    p.set_defaults(handler=set_secret)
    p = secret.add_parser("list", help="a project's secrets: names, versions, sizes, who and when (never a value)")
    api_options(p)
    p.set_defaults(handler=list_secrets)
    p = secret.add_parser("delete", help="delete a secret: tasks naming it fail to start until it is set again")
    api_options(p)
    p.add_argument("name", type=_name, metavar="NAME", help="the secret's name")
    p.set_defaults(handler=delete_secret)
    p = secret.add_parser("keygen", help="write a new key-encryption key file for the shell ([secrets] kek_file)")
    p.add_argument("--out", type=Path, required=True, help="the new file (created 0600; never overwritten)")
    p.set_defaults(handler=keygen)
