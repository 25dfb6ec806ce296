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
from typing import TYPE_CHECKING, Any, Final

from qinglong.cli import operators as op
from qinglong.cli.api import ApiError
from qinglong.cli.common import EXIT_UNAVAILABLE, Failure, id_prefix, starts
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


def listing(names: Sequence[str], most: int = 10) -> str:
    """Names for a refusal: the first `most`, and how many more."""
    shown = ", ".join(names[:most]) or "none"
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def one(
    items: Sequence[dict[str, Any]], key: str, wanted: str, what: str, id_key: str, seen: str = ""
) -> dict[str, Any]:
    """The item whose `key` (name), id or short id (common.id_prefix) is `wanted`, in that order; none, or several of
    one kind, is a Failure that names the candidates (`seen`: whose list they are; inside an operator transaction
    it rolls back)."""
    prefix = id_prefix(wanted)
    for found in (
        [i for i in items if i[key] == wanted],
        [i for i in items if str(i[id_key]) == wanted.lower()],
        [i for i in items if prefix is not None and starts(str(i[id_key]), prefix)],
    ):
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            each = listing([f"{i[id_key]} ({i[key]})" for i in found])
            raise Failure(f"{len(found)} {what}s match {wanted!r}: {each}: name one by its full id")
    whose = f"{what}s {seen}" if seen else f"{what}s"
    raise Failure(f"no {what} {wanted!r} ({whose}: {listing([str(i[key]) for i in items])})")


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
    origin = str(fixed["api"])
    if not origin.startswith("https://"):
        rest = origin.split("://", 1)[-1]
        raise Failure(f"the user API address {origin!r} is not https: it speaks HTTPS only (use https://{rest})")
    if not re.fullmatch(BEARER_TOKEN_PATTERN, token):
        raise Failure(
            "the token (--token-file or QINGLONG_TOKEN) is not a bearer token: 16 to 512 of A-Z a-z 0-9 . _ ~ + / -"
        )
    return UserApi(origin.rstrip("/"), token, Path(fixed["ca"]))


def user_call(call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """One user API call; a bad CA or an unreachable shell becomes a one-line Failure (a refusal stays ApiError)."""
    from qinglong.cli.api import BadCa, Unreachable

    try:
        return call()
    except BadCa as exc:
        raise Failure(str(exc)) from None
    except Unreachable as exc:
        raise Failure(f"shell unreachable at {exc}", EXIT_UNAVAILABLE) from None


# What to do about a refusal, by its code (and for 403 denied, by the admission reason in its message).
_ARCHIVED: Final = "the project is archived: it only reads"
_ADVICE: Final = {
    "auth.unauthenticated": "the shell knows no active subject with this bearer token: check --token-file "
    "(or QINGLONG_TOKEN_FILE, QINGLONG_TOKEN); an operator lists subjects with `qinglong subject list`",
    "role.insufficient": "your role there does not allow it: an owner or admin can grant one (`qinglong role set`)",
    "project.archived": _ARCHIVED,
    "approval_required": "an agent may not stop a Run: a user must cancel it",
    "fenced.task_disabled": "the task is disabled: an operator enables it with `qinglong task enable`",
    "fenced.project_archived": _ARCHIVED,
    "storage.conflict": "it collided with another change: run the command again",
    "storage.unavailable": "the shell cannot reach its database: try again later",
}


class UserScope:
    """A command's user API client and the Project it names, which is resolved on first use: by name or id as the
    shell resolves it, else (a short id) among the Projects the token may read. Every refusal becomes one line that
    says what was refused, why (HTTP status and code) and what to do."""

    def __init__(self, api: UserApi, project: str | None) -> None:
        self.api, self.project = api, project
        self._resolved = project is not None and not id_prefix(project)

    def projects(self, run_prefix: str | None = None) -> dict[str, Any]:
        """The Projects this token may read (and the Runs there whose id starts with `run_prefix`)."""
        try:
            return user_call(lambda: self.api.projects(run_prefix))
        except ApiError as exc:
            raise Failure(self.refusal("listing your projects", exc)) from None

    def seen(self, found: dict[str, Any] | None = None) -> str:
        """The names of the Projects this token may read, for a refusal."""
        return listing([p["project"] for p in (found or self.projects())["projects"]])

    def call(self, doing: str, call: Callable[[str], dict[str, Any]], missing: str = "") -> dict[str, Any]:
        """call(project) as one line on a refusal: `doing` says what was asked, `missing` what a 404 means (a 404
        whose reason is an Attempt says so instead)."""
        assert self.project is not None
        try:
            return user_call(lambda: call(self.project or ""))
        except ApiError as exc:
            if exc.status == 404 and exc.message == "project.not_found" and not self._resolved:
                self._resolved = True
                listed = self.projects()
                self.project = str(one(listed["projects"], "project", self.project, "project", "projectId",
                                       "you can see")["projectId"])  # fmt: skip
                return self.call(doing, call, missing)
            raise Failure(self.refusal(doing, exc, missing)) from None

    def refusal(self, doing: str, exc: ApiError, missing: str = "") -> str:
        if exc.status == 404 and exc.message == "project.not_found":
            return f"no project {self.project!r} (projects you can see: {self.seen()})"
        if exc.status == 404 and exc.message == "attempt":
            return f"{doing}: no such Attempt (`qinglong run show` lists the Run's Attempts)"
        if exc.status == 404 and missing:
            return missing
        from qinglong.wire.errors import ERRORS

        advice = _ADVICE.get(exc.message if exc.code == "denied" else exc.code)
        known = ERRORS.get(exc.code)
        if advice is None:
            advice = known.meaning if known is not None else "the shell refused it"
            if exc.message not in ("", exc.code, exc.code.rsplit(".", 1)[-1]):
                advice += f": {exc.message}"  # the field or rule a wire.* refusal names
        return f"{doing}: refused ({exc.status} {exc.code}): {advice}"
