"""`qinglong`: the operator's command line. Each command prints one line on failure and exits non-zero
(2 for bad usage or input, 3 when a service it needs is unreachable); never a traceback.
Touches what each command says: files it is pointed at, the database, the network.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3


def _shell_serve(args: argparse.Namespace) -> int:
    from qinglong.shell.config import ConfigError
    from qinglong.shell.serve import main as serve

    try:
        serve(args.config)
    except ConfigError as exc:
        print(f"qinglong shell serve: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"qinglong shell serve: cannot listen: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    return 0


def _pki_init(args: argparse.Namespace) -> int:
    from qinglong.cli import pki

    pki.init_ca(args.dir)
    issued = pki.issue_server(args.dir, args.host)
    print(f"CA and server certificate for {', '.join(args.host)} in {args.dir} ({issued.certificate.name})")
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="qinglong", description="Qinglong remote worker control: operator commands")
    sub = top.add_subparsers(dest="group", required=True)

    shell = sub.add_parser("shell", help="the HTTPS shell").add_subparsers(dest="command", required=True)
    serve = shell.add_parser("serve", help="serve the worker ingress, user API and admin listeners")
    serve.add_argument("--config", type=Path, required=True, help="TOML file (see qinglong.shell.config)")
    serve.set_defaults(run=_shell_serve)

    pki = sub.add_parser("pki", help="the deployment's private PKI").add_subparsers(dest="command", required=True)
    init = pki.add_parser("init", help="create a CA and the shell's server certificate")
    init.add_argument("--dir", type=Path, required=True, help="folder for ca.crt/ca.key/server.crt/server.key")
    init.add_argument("--host", action="append", required=True, help="server DNS name or IP (repeatable)")
    init.set_defaults(run=_pki_init)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
