"""`qinglong pki`: the deployment's private PKI (a CA and the shell's server certificate), and the operator keys
that sign task revisions' plans (`pki plan-key`, qinglong.wire.signing).
Touches the folder given by --dir (nothing in it is replaced without --force) and the key files it is named (a key
file is never replaced).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from qinglong.cli.common import Commands, Failure, Parser, group


def init(args: argparse.Namespace) -> int:
    from qinglong.cli import pki

    present = [name for name in ("ca.crt", "ca.key") if (args.dir / name).exists()]
    if present and not args.force:
        raise Failure(f"{args.dir} already holds a CA ({', '.join(present)}): pass --force to replace it")
    pki.init_ca(args.dir)
    issued = pki.issue_server(args.dir, args.host)
    print(f"CA and server certificate for {', '.join(args.host)} in {args.dir} ({issued.certificate.name})")
    return 0


PLAN_KEY_ROTATION = (
    "A Worker spawns only plans signed by a key it trusts (its .pub files). To rotate: make a new key, add its .pub "
    "to every Worker's trusted keys, sign new task revisions with it, then remove the old .pub (revisions the old "
    "key signed are refused from then on)."
)


def plan_key_new(args: argparse.Namespace) -> int:
    from qinglong.wire import signing

    try:
        made = signing.write_private_key(args.path)
    except FileExistsError as exc:
        raise Failure(f"{exc.filename or args.path} exists: a key file is never overwritten") from None
    except OSError as exc:
        raise Failure(f"cannot create {exc.filename or args.path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise Failure(str(exc)) from None
    print(f"plan key {made.key_id}: private {made.private} (mode 0600), public {made.public} (give it to Workers)")
    return 0


def plan_key_show(args: argparse.Namespace) -> int:
    from qinglong.wire import signing

    path: Path = args.path
    try:
        if path.suffix == signing.PUBLIC_SUFFIX:
            public = signing.load_public_key(path)
        else:
            public = signing.load_private_key(path).public_key()
    except ValueError as exc:
        raise Failure(str(exc)) from None
    print(signing.key_id(public))
    return 0


def register(top: Commands) -> None:
    pki = group(top, "pki", "the deployment's private PKI, and the keys that sign task plans")
    p = pki.add_parser("init", help="create a CA and the shell's server certificate")
    p.add_argument("--dir", type=Path, required=True, help="folder for ca.crt/ca.key/server.crt/server.key")
    p.add_argument("--host", action="append", required=True, help="server DNS name or IP (repeatable)")
    p.add_argument("--force", action="store_true", help="replace a CA the folder already holds")
    p.set_defaults(handler=init)

    keys = pki.add_parser(
        "plan-key", help="Ed25519 operator keys that sign task revisions' plans", description=PLAN_KEY_ROTATION
    ).add_subparsers(dest="command", required=True, parser_class=Parser)
    p = keys.add_parser(
        "new",
        help="make a key pair: PATH (private, 0600) and its .pub beside it (PATH ops.key → ops.pub)",
        description=PLAN_KEY_ROTATION,
    )
    p.add_argument("path", type=Path, metavar="PATH", help="the new private key file (never overwritten), e.g. ops.key")
    p.set_defaults(handler=plan_key_new)
    p = keys.add_parser("show", help="print the key id of a private key file or of a .pub file")
    p.add_argument("path", type=Path, metavar="PATH", help="a private key file (e.g. ops.key) or a public one (.pub)")
    p.set_defaults(handler=plan_key_show)
