"""Command line: run one command against a throw-away PostgreSQL cluster; touches only its root.

    python -m qinglong.devdb run [--root DIR] [--fsync on|off] [--port N] [--keep]
                                 [--no-cron] [-c NAME=VALUE]... -- CMD ARGS...

starts a `Cluster` (root: a fresh folder under /tmp unless --root), runs CMD with the
cluster's PGHOST/PGPORT/PGUSER/PGDATABASE added to the environment, stops the cluster,
removes the temporary root (unless --keep; a --root folder is never removed) and exits with
CMD's exit code (128+N when CMD dies of signal N). SIGINT and SIGTERM still stop the cluster:
CMD gets the signal, then the cluster stops and the exit code is 128+N. Errors are one line
on stderr and exit code 2; when the server fails to start, its temporary root is kept so the
log can be read.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import NoReturn

from qinglong.devdb.cluster import Cluster, ClusterError

# Not $TMPDIR: when run as root the server runs as `postgres`, which must be able to
# traverse every parent of the root, and /tmp is world-traversable.
_TMP = "/tmp"  # noqa: S108
_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_CHILD_GRACE = 10.0
_PROG = "qinglong-devdb"


class _Failure(Exception):
    """An error reported as one line on stderr, exit code 2."""


class _Interrupted(BaseException):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{_PROG}: {message} (see --help)\n")


def _interrupt(signum: int, frame: FrameType | None) -> None:
    # Raise once; from then on signals are only noted, so the clean-up cannot be cut short.
    for s in _SIGNALS:
        signal.signal(s, _ignore)
    raise _Interrupted(signum)


def _ignore(signum: int, frame: FrameType | None) -> None:
    pass


class _Session:
    def __init__(self, args: argparse.Namespace, command: list[str]) -> None:
        self.args = args
        self.command = command
        self.temporary = args.root is None
        self.keep = bool(args.keep) or not self.temporary
        self.root: Path | None = None
        self.cluster: Cluster | None = None
        self.child: subprocess.Popen[bytes] | None = None
        self.signum: int | None = None
        self.cleaned = False

    def run(self) -> int:
        if self.temporary:
            self.root = Path(tempfile.mkdtemp(prefix="qinglong-devdb-", dir=_TMP))
            self.root.chmod(0o755)
        else:
            self.root = Path(self.args.root)
        self.cluster = Cluster(
            self.root,
            fsync=self.args.fsync == "on",
            port=self.args.port,
            preload_cron=not self.args.no_cron,
            settings=dict(self.args.settings),
        )
        try:
            self.cluster.start()
        except ClusterError as exc:
            log = self.cluster.log_file
            if self.temporary and log.is_file() and log.stat().st_size > 0:
                self.keep = True
                raise _Failure(f"{exc.summary}; see {log}") from None
            raise _Failure(exc.summary) from None
        env = {**os.environ, **self.cluster.env()}
        try:
            self.child = subprocess.Popen(self.command, env=env)
        except OSError as exc:
            raise _Failure(f"cannot run {self.command[0]}: {exc.strerror or exc}") from None
        code = self.child.wait()
        return 128 - code if code < 0 else code

    def cleanup(self) -> None:
        """End the child (after a signal), stop the cluster, remove the root; idempotent."""
        if self.cleaned:
            return
        if self.signum is not None and self.child is not None:
            _end_child(self.child, self.signum)
        if self.cluster is not None:
            self.cluster.stop()
        if self.root is not None and not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)
        elif self.root is not None and self.temporary and self.args.keep:
            print(f"{_PROG}: kept cluster root {self.root}", file=sys.stderr)
        self.cleaned = True


def _end_child(child: subprocess.Popen[bytes], signum: int) -> None:
    if child.poll() is not None:
        return
    if signum == signal.SIGINT:
        # A Ctrl-C in the terminal reached the child too (same process group): let it finish.
        try:
            child.wait(timeout=1.0)
            return
        except subprocess.TimeoutExpired:
            pass
    try:
        child.send_signal(signum)
        child.wait(timeout=_CHILD_GRACE)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def _setting(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name.strip(), value


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}")
    return port


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=_PROG, description="Throw-away PostgreSQL clusters.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = commands.add_parser(
        "run",
        help="run CMD against a fresh cluster",
        usage=f"{_PROG} run [options] -- CMD ARGS...",
    )
    run.add_argument("--root", help="cluster folder (kept); default: a temporary one")
    run.add_argument("--fsync", choices=("on", "off"), default="on")
    run.add_argument("--port", type=_port, help="default: a free port")
    run.add_argument("--keep", action="store_true", help="keep the temporary root")
    run.add_argument("--no-cron", action="store_true", help="do not preload pg_cron")
    run.add_argument(
        "-c",
        dest="settings",
        metavar="NAME=VALUE",
        type=_setting,
        action="append",
        default=[],
        help="a server setting (repeatable)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    if "--" in args_in:
        split = args_in.index("--")
        options, command = args_in[:split], args_in[split + 1 :]
    else:
        options, command = args_in, []
    args = parser.parse_args(options)
    if not command:
        parser.error("missing -- CMD ARGS...")

    previous = {s: signal.signal(s, _interrupt) for s in _SIGNALS}
    session = _Session(args, command)
    try:
        try:
            try:
                return session.run()
            except _Interrupted as exc:
                session.signum = exc.signum
                return 128 + exc.signum
            finally:
                session.cleanup()
        except _Interrupted as exc:
            # The first signal came during the clean-up: finish it (signals are ignored now).
            session.signum = exc.signum
            session.cleanup()
            return 128 + exc.signum
    except (_Failure, ClusterError, OSError, ValueError) as exc:
        message = exc.summary if isinstance(exc, ClusterError) else str(exc)
        print(f"{_PROG}: {message}", file=sys.stderr)
        return 2
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


if __name__ == "__main__":
    raise SystemExit(main())
