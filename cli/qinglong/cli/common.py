"""What every command group shares: the one-line Failure and its exit codes, the parser whose usage error is one
line, the argument types and the common options. Touches nothing but stderr (a usage error).
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Final, NoReturn, TypeAlias

from qinglong.wire.common import NAME_PATTERN
from qinglong.wire.project import RUN_ID_PREFIX_PATTERN
from qinglong.wire.specs import UUID_PATTERN

Commands: TypeAlias = "argparse._SubParsersAction[Parser]"  # the top-level parser's commands, or a group's
Handler: TypeAlias = Callable[[argparse.Namespace], int]

EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3
EXIT_INTERRUPTED = 128 + 2  # Ctrl-C: what a shell reports for a process SIGINT ended
# `run logs --follow`: how the Run (or the --attempt followed) ended. Any other end of an Attempt counts as failed.
EXIT_OUTCOMES: Final = {"succeeded": 0, "failed": 1, "cancelled": 4, "timed_out": 5}
ROLES = ("owner", "admin", "operator", "viewer")
ID_PREFIX_MIN: Final = 8  # hex digits of a short id: what the console and the demo show


class Failure(Exception):
    """A one-line reason and an exit code."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit 2), like every other failure."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message} (see --help)", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def group(top: Commands, name: str, text: str) -> Commands:
    """A command group of the top-level parser: its commands."""
    return top.add_parser(name, help=text).add_subparsers(dest="command", required=True, parser_class=Parser)


# -- argument types ---------------------------------------------------------------------------


def uuid_text(text: str) -> str:
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a uuid: {text}") from None


def id_prefix(text: str) -> str | None:
    """The hex digits of a short id (at least ID_PREFIX_MIN of an id's, any hyphens left out), else None."""
    digits = text.replace("-", "").lower()
    return digits if re.fullmatch(RUN_ID_PREFIX_PATTERN, digits) and len(digits) >= ID_PREFIX_MIN else None


def starts(an_id: str, prefix: str) -> bool:
    """Whether the id's hex digits start with the prefix's (id_prefix)."""
    return an_id.replace("-", "").lower().startswith(prefix)


def run_id(text: str) -> str:
    """A Run's id, or a short id: a prefix of at least ID_PREFIX_MIN of its hex digits."""
    if not is_uuid(text) and id_prefix(text) is None:
        raise argparse.ArgumentTypeError(f"not a Run id, nor {ID_PREFIX_MIN} or more of its first hex digits: {text!r}")
    return text.lower()


def is_uuid(text: str) -> bool:
    """An id where a name or an id is taken: the canonical form in either case, as the database reads one
    (ql.project_named). Not uuid.UUID, which also reads task names such as 32 hex digits with an underscore: those
    stay names (the database refuses only names that read as a uuid, ql.name_is_uuid)."""
    return re.fullmatch(UUID_PATTERN, text, re.IGNORECASE) is not None


def name(text: str) -> str:
    """A project's or task's name, or an id (a name has the form of ql.projects.name and ql.tasks.name)."""
    if not re.fullmatch(NAME_PATTERN, text):
        raise argparse.ArgumentTypeError(f"not a name or id: {text!r}")
    return text


def positive(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a positive integer: {text}")
    return int(text)


def instant_ms(text: str) -> int:
    """An ISO 8601 date or date-time as ms since the epoch; one without a UTC offset is UTC."""
    try:
        at = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 date or date-time: {text}") from None
    at = at if at.tzinfo is not None else at.replace(tzinfo=dt.UTC)
    return (at - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(milliseconds=1)


# -- common options ---------------------------------------------------------------------------


PROJECT_HELP: Final = "the project, by name, id or short id"


def dsn_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dsn", help="DBA connection string (default: QINGLONG_DSN)")


def api_options(p: argparse.ArgumentParser, project: bool = True) -> None:
    """--api, --ca, --token-file, --json and (unless the command finds it from a Run's id) a required --project."""
    p.add_argument("--api", help="user API origin, https://host:port (default: QINGLONG_API, then the profile)")
    p.add_argument("--ca", type=Path, help="CA certificate that signed the shell's certificate "
                   "(default: QINGLONG_CA, then the profile)")  # fmt: skip
    p.add_argument("--token-file", type=Path, help="file holding your bearer token "
                   "(default: QINGLONG_TOKEN_FILE or QINGLONG_TOKEN, then the profile)")  # fmt: skip
    if project:
        p.add_argument("--project", type=name, required=True, metavar="NAME|ID", help=PROJECT_HELP)
    else:
        p.add_argument("--project", type=name, metavar="NAME|ID",
                       help=PROJECT_HELP + " (default: the Run's own, found from its id)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the answer as one JSON document")


def run_argument(p: argparse.ArgumentParser) -> None:
    """The Run a command acts on: RUN, or --run RUN (its id or a short id)."""
    p.add_argument("run", nargs="?", type=run_id, metavar="RUN", help="the Run's id, or its first 8+ hex digits")
    p.add_argument(
        "--run", dest="run_option", type=run_id, metavar="RUN", help="the same, as an option (give one of the two)"
    )


def the_run(args: argparse.Namespace) -> str:
    """The Run run_argument read: one of RUN and --run."""
    given = [r for r in (args.run, args.run_option) if r is not None]
    if len(given) != 1:
        raise Failure("name the Run once: RUN or --run RUN (see --help)")
    return str(given[0])


def creating_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the answer as one JSON document, not the id")
    p.add_argument("--verbose", action="store_true", help="also print a sentence on stderr")


def catalogue_command(where: Commands, command: str, text: str, handler: Handler) -> Parser:
    """A command that reads or changes the catalogue over the DBA connection: --dsn and --json."""
    p = where.add_parser(command, help=text)
    dsn_option(p)
    p.add_argument("--json", action="store_true", help="the same fields as one JSON document")
    p.set_defaults(handler=handler)
    return p
