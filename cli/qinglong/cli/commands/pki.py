"""`qinglong pki`: the deployment's private PKI (a CA and the shell's server certificate).
Touches the folder given by --dir (nothing in it is replaced without --force).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from qinglong.cli.common import Commands, Failure, group


def init(args: argparse.Namespace) -> int:
    from qinglong.cli import pki

    present = [name for name in ("ca.crt", "ca.key") if (args.dir / name).exists()]
    if present and not args.force:
        raise Failure(f"{args.dir} already holds a CA ({', '.join(present)}): pass --force to replace it")
    pki.init_ca(args.dir)
    issued = pki.issue_server(args.dir, args.host)
    print(f"CA and server certificate for {', '.join(args.host)} in {args.dir} ({issued.certificate.name})")
    return 0


def register(top: Commands) -> None:
    p = group(top, "pki", "the deployment's private PKI").add_parser(
        "init", help="create a CA and the shell's server certificate"
    )
    p.add_argument("--dir", type=Path, required=True, help="folder for ca.crt/ca.key/server.crt/server.key")
    p.add_argument("--host", action="append", required=True, help="server DNS name or IP (repeatable)")
    p.add_argument("--force", action="store_true", help="replace a CA the folder already holds")
    p.set_defaults(handler=init)
