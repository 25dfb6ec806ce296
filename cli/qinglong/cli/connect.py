"""How a command reaches what it acts on: operator transactions over the DBA connection (--dsn or QINGLONG_DSN),
the names they resolve to ids, and the user API client (its flags, else QINGLONG_* variables, else the client
profile). Refusals and faults become one-line Failures. Touches the database, the shell and the profile file.
"""

from __future__ import annotations

import argparse
import os
import re
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qinglong.cli import operators as op
from qinglong.cli.common import EXIT_UNAVAILABLE, Failure
from qinglong.wire.codec import WireError
from qinglong.wire.fields import Record, Str, wire
from qinglong.wire.specs import BEARER_TOKEN_PATTERN

if TYPE_CHECKING:
    from qinglong.cli.admin import Transaction
    from qinglong.cli.api import UserApi


def dsn(args: argparse.Namespace) -> str:
    found = args.dsn or os.environ.get("QINGLONG_DSN")
    if not found:
        raise Failure("no database: pass --dsn or set QINGLONG_DSN")
    return str(found)


def admin_transaction(args: argparse.Namespace, body: Callable[[Transaction], dict[str, Any]]) -> dict[str, Any]:
    """Operator calls that commit together; refusals and faults become one-line failures."""
    from qinglong.cli.admin import Refused, Unavailable, transaction

    try:
        with transaction(dsn(args)) as tx:
            return body(tx)
    except Unavailable as exc:
        raise Failure(f"database unreachable: {exc}", EXIT_UNAVAILABLE) from None
    except Refused as exc:
        raise Failure(str(exc)) from None


def refused(message: str) -> Exception:
    """A refusal found by the CLI itself (inside the transaction, so it rolls back): one line, exit 2."""
    from qinglong.cli.admin import Refused

    return Refused(message)


def one(items: Sequence[dict[str, Any]], key: str, wanted: str, what: str, id_key: str) -> dict[str, Any]:
    """The item whose id or `key` (name) is `wanted`; none or several is a refusal."""
    found = [i for i in items if str(i[id_key]) == wanted.lower() or i[key] == wanted]
    if not found:
        raise refused(f"no {what} {wanted!r}")
    if len(found) > 1:
        raise refused(f"{len(found)} {what}s are named {wanted!r}: name one by its id")
    return found[0]


def project_id(tx: Transaction, wanted: str) -> str:
    """The id of the project named `wanted` (or whose id it is), inside the caller's transaction."""
    return str(one(tx.call(op.project_list_v1)["projects"], "name", wanted, "project", "projectId")["projectId"])


def worker_id(tx: Transaction, wanted: str) -> str:
    """The id of the Worker named `wanted` (or whose id it is), inside the caller's transaction."""
    return str(one(tx.call(op.worker_list_v1)["workers"], "name", wanted, "worker", "workerId")["workerId"])


class _ClientFile(Record):
    """client.toml exactly (the wire contracts' field engine): an unknown key is refused, naming it.
    Relative paths are relative to the file."""

    api: str | None = wire(Str(2048, min_len=1), name="api", optional=True, default=None)
    ca: str | None = wire(Str(4096, min_len=1), name="ca", optional=True, default=None)
    token_file: str | None = wire(Str(4096, min_len=1), name="token_file", optional=True, default=None)


def _profile() -> dict[str, Any]:
    """The client profile: $QINGLONG_CONFIG (which must exist), else ~/.config/qinglong/client.toml if it exists."""
    named = os.environ.get("QINGLONG_CONFIG")
    path = Path(named) if named else Path.home() / ".config" / "qinglong" / "client.toml"
    if not named and not path.is_file():
        return {}
    try:
        given = _ClientFile.load_at(tomllib.loads(path.read_text()), path.name)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise Failure(f"cannot read the client profile {path}: {getattr(exc, 'strerror', None) or exc}") from None
    except WireError as exc:
        raise Failure(f"client profile: {exc.message}") from None
    return {
        "api": given.api,
        "ca": given.ca and path.parent / given.ca,
        "token_file": given.token_file and path.parent / given.token_file,
    }


def user_api(args: argparse.Namespace) -> UserApi:
    """The user API client: each of --api, --ca, --token-file, else its QINGLONG_* variable, else the profile."""
    from qinglong.cli.api import UserApi

    env = os.environ.get
    fixed = {"api": args.api or env("QINGLONG_API"), "ca": args.ca or env("QINGLONG_CA")}
    fixed["token_file"] = args.token_file or env("QINGLONG_TOKEN_FILE")
    token = "" if args.token_file else env("QINGLONG_TOKEN", "")  # an explicit --token-file wins
    if not all(fixed.values()) and not (token and fixed["api"] and fixed["ca"]):
        profile = _profile()
        fixed = {k: v or profile.get(k) for k, v in fixed.items()}
    if not token and fixed["token_file"]:
        token = Path(fixed["token_file"]).read_text().strip()
    if not fixed["api"] or not token or not fixed["ca"]:
        raise Failure("the user API needs --api, --ca and --token-file (or QINGLONG_TOKEN)")
    if not re.fullmatch(BEARER_TOKEN_PATTERN, token):
        raise Failure(
            "the token (--token-file or QINGLONG_TOKEN) is not a bearer token: 16 to 512 of A-Z a-z 0-9 . _ ~ + / -"
        )
    return UserApi(str(fixed["api"]).rstrip("/"), token, Path(fixed["ca"]))


def user_call(call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """One user API call; a refusal, a bad CA or an unreachable shell becomes a one-line Failure."""
    from qinglong.cli.api import ApiError, BadCa, Unreachable

    try:
        return call()
    except BadCa as exc:
        raise Failure(str(exc)) from None
    except ApiError as exc:
        raise Failure(f"refused: {exc.status} {exc.code}") from None
    except Unreachable as exc:
        raise Failure(f"shell unreachable: {exc}", EXIT_UNAVAILABLE) from None
