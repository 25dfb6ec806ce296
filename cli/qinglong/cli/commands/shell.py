"""`qinglong shell serve`: the HTTPS shell (worker ingress, user API and admin listeners) until SIGTERM.
Touches what its --config file names: the database, the listeners' ports, the PKI files.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from qinglong.cli.common import EXIT_UNAVAILABLE, Commands, Failure, group


def serve(args: argparse.Namespace) -> int:
    from qinglong.shell.config import ConfigError
    from qinglong.shell.serve import main as serve_main

    try:
        return serve_main(args.config)
    except ConfigError as exc:
        raise Failure(str(exc)) from None
    except OSError as exc:
        raise Failure(f"cannot listen: {exc.strerror or exc}", EXIT_UNAVAILABLE) from None


def register(top: Commands) -> None:
    p = group(top, "shell", "the HTTPS shell").add_parser(
        "serve", help="serve the worker ingress, user API and admin listeners"
    )
    p.add_argument("--config", type=Path, required=True, help="TOML file (see qinglong.shell.config)")
    p.set_defaults(handler=serve)
