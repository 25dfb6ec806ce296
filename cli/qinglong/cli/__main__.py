"""`qinglong`: the operator's command line. Every command prints one line on failure and exits
non-zero — 2 for bad usage or input (including a refused request or a TLS certificate that does not
verify), 3 when a service it needs is unreachable — never a traceback. A refusal says what was refused, why
(the HTTP status and stable code) and what to do. A reader that goes away (`| head`)
ends it quietly with 141, as SIGPIPE ends other Unix tools, and Ctrl-C quietly with 130. `run logs --follow`
exits with how the Run ended (common.EXIT_OUTCOMES). `qinglong <group> <command> --help` documents
each one. A creating command prints the new id alone on stdout (so `X=$(qinglong … create …)` works;
--verbose adds a sentence on stderr); --json prints the answer as one JSON document.
Touches what each command says: the database (DBA connection from --dsn or QINGLONG_DSN), the
shell's user API (--api, --ca, --token-file, else QINGLONG_API, QINGLONG_CA, QINGLONG_TOKEN_FILE or
QINGLONG_TOKEN, else the client profile: $QINGLONG_CONFIG or ~/.config/qinglong/client.toml), files it is
pointed at (it replaces none unless --force), local processes. The commands are in qinglong.cli.commands.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
from collections.abc import Sequence

from qinglong.cli.commands import GROUPS
from qinglong.cli.common import EXIT_INTERRUPTED, EXIT_USAGE, Failure, Parser

EXIT_BROKEN_PIPE = 128 + 13  # what a shell reports for a process SIGPIPE ended


def parser() -> argparse.ArgumentParser:
    top = Parser(prog="qinglong", description="Qinglong remote worker control: operator commands")
    try:
        version = importlib.metadata.version("qinglong-control")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown (not installed)"
    top.add_argument("--version", action="version", version=f"qinglong {version}", help="print the version and exit")
    commands = top.add_subparsers(dest="group", required=True, parser_class=Parser)
    for register in GROUPS:
        register(commands)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
        code: int = args.handler(args)
        sys.stdout.flush()  # here, so a reader that went away is seen here
    except KeyboardInterrupt:  # Ctrl-C: quietly, as other tools end
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's own flush must not fail again
        return EXIT_BROKEN_PIPE
    except Failure as failure:
        print(f"qinglong: {failure}", file=sys.stderr)
        return failure.code
    except OSError as exc:
        print(f"qinglong: {exc.strerror or exc}: {getattr(exc, 'filename', '') or ''}".rstrip(": "), file=sys.stderr)
        return EXIT_USAGE
    return code


if __name__ == "__main__":
    sys.exit(main())
