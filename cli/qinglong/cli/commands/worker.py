"""`qinglong worker`: enrol a Worker and renew its certificate (issued here, recorded in one operator transaction),
run one, list them, disable and enable them. Touches the PKI folder of --pki, the database (DBA connection), and
for `run` the Worker's own configuration and processes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qinglong.cli import operators as op
from qinglong.cli.common import Commands, Failure, catalogue_command, creating_options, dsn_option, group, uuid_text
from qinglong.cli.connect import admin_transaction, worker_id
from qinglong.cli.printing import created, emit, status_set, table, when

if TYPE_CHECKING:
    from qinglong.cli.admin import Transaction
    from qinglong.cli.pki import Issued


def _issue_and_record(
    args: argparse.Namespace,
    worker: Callable[[Transaction], str],
    record: Callable[[Transaction, str, Issued], dict[str, Any]],
) -> tuple[dict[str, Any], Issued]:
    """Issue a Worker certificate into pending files and record it in one operator transaction; only once it has
    committed do the files become worker-<id>.crt/.key (each replaced by one rename). A refusal removes the
    pending files and leaves the installed ones untouched."""
    from qinglong.cli import pki

    if not (args.pki / "ca.key").is_file():
        raise Failure(f"no CA in {args.pki}: run `qinglong pki init` first")
    pending: list[pki.Issued] = []

    def body(tx: Transaction) -> dict[str, Any]:
        wid = worker(tx)
        pending.append(pki.issue_worker(args.pki, wid, name=f"worker-{wid}.pending"))
        return {**record(tx, wid, pending[0]), "workerId": wid}

    try:
        result = admin_transaction(args, body)
    except Failure:
        for issued in pending:
            issued.certificate.unlink(missing_ok=True)
            issued.key.unlink(missing_ok=True)
        raise
    new = pending[0]
    wid = result["workerId"]
    issued = pki.Issued(
        new.certificate.rename(args.pki / f"worker-{wid}.crt"),
        new.key.rename(args.pki / f"worker-{wid}.key"),
        new.fingerprint,
        new.not_after_ms,
    )
    return result, issued


def enroll(args: argparse.Namespace) -> int:
    def record(tx: Transaction, wid: str, issued: Issued) -> dict[str, Any]:
        result = tx.call(op.worker_enroll_v1, p_worker_id=wid, p_name=args.name, p_pool=args.pool,
                         p_cert_fingerprint=issued.fingerprint)  # fmt: skip
        # records its expiry
        tx.call(op.worker_certificate_renew_v1, p_worker_id=wid, p_cert_fingerprint=issued.fingerprint,
                p_not_after_ms=issued.not_after_ms)  # fmt: skip
        return result

    new_id = args.id or str(uuid.uuid4())
    result, issued = _issue_and_record(args, lambda tx: new_id, record)
    answer = {**result, "certificate": str(issued.certificate), "key": str(issued.key)}
    sentence = (
        f"{result['status']} worker {new_id} generation {result['generation']}: {issued.certificate}, {issued.key}"
    )
    return created(args, new_id, answer, sentence)


def renew(args: argparse.Namespace) -> int:
    def record(tx: Transaction, wid: str, new: Issued) -> dict[str, Any]:
        return tx.call(op.worker_certificate_renew_v1, p_worker_id=wid, p_cert_fingerprint=new.fingerprint,
                       p_not_after_ms=new.not_after_ms)  # fmt: skip

    result, issued = _issue_and_record(args, lambda tx: worker_id(tx, args.worker), record)
    expires = dt.datetime.fromtimestamp(issued.not_after_ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    answer = {**result, "certificate": str(issued.certificate), "key": str(issued.key)}
    sentence = (
        f"renewed worker {result['workerId']} generation {result['generation']}, expires {expires}: "
        f"{issued.certificate}, {issued.key} (install both on the Worker; no restart)"
    )
    return created(args, result["workerId"], answer, sentence)


def run(args: argparse.Namespace) -> int:
    from qinglong.worker.run import main as worker_main

    return worker_main(["run", "--config", str(args.config)])


def list_workers(args: argparse.Namespace) -> int:
    listed = admin_transaction(args, lambda tx: tx.call(op.worker_list_v1))
    rows = [
        (w["workerId"], w["name"], w["pool"], w["generation"], w["status"], w["online"], w["activeAttempts"],
         when(w["lastContactAtMs"]), when(w["certNotAfterMs"]))
        for w in listed["workers"]
    ]  # fmt: skip
    heads = ("ID", "NAME", "POOL", "GENERATION", "STATUS", "ONLINE", "ATTEMPTS", "LAST CONTACT", "CERT EXPIRES")
    return emit(args, {"workers": listed["workers"]}, table(heads, rows))


def set_status(args: argparse.Namespace, active: bool) -> int:
    done = admin_transaction(
        args, lambda tx: tx.call(op.worker_status_set_v1, p_worker=worker_id(tx, args.worker), p_active=active)
    )
    closed = f", session {done['closedSessionId']} closed" if done["closedSessionId"] else ""
    return status_set(args, done, "worker", "workerId", closed)


def register(top: Commands) -> None:
    worker = group(top, "worker", "enrol and run Workers")
    p = worker.add_parser("enroll", help="issue a client certificate and enrol (or re-enrol) a Worker")
    dsn_option(p)
    p.add_argument("--pki", type=Path, required=True, help="the folder of `qinglong pki init`")
    p.add_argument("--name", required=True, help="a name for people (1 to 200 characters)")
    p.add_argument("--pool", default="default", help="the pool it takes Runs of (default: default)")
    p.add_argument("--id", type=uuid_text, help="re-enrol this Worker id (bumps its generation; default: a new Worker, "
                   "with a new id)")  # fmt: skip
    creating_options(p)
    p.set_defaults(handler=enroll)
    p = worker.add_parser(
        "renew", help="issue a new client certificate for a Worker, same generation (its tasks go on; no restart)"
    )
    dsn_option(p)
    p.add_argument("--pki", type=Path, required=True, help="the folder of `qinglong pki init`")
    p.add_argument("worker", metavar="NAME|ID", help="the Worker, by name, id or short id")
    creating_options(p)
    p.set_defaults(handler=renew)
    p = worker.add_parser("run", help="run a Worker until SIGTERM")
    p.add_argument("--config", type=Path, required=True, help="TOML file (see qinglong.worker.run)")
    p.set_defaults(handler=run)
    text = "every Worker: pool, generation, online (a live session), Attempts, last contact, certificate expiry"
    catalogue_command(worker, "list", text, list_workers)
    for name, active, text in (
        ("disable", False, "disable a Worker: its session closes (fenced at once), no new session opens"),
        ("enable", True, "enable a disabled Worker"),
    ):
        p = catalogue_command(worker, name, text, functools.partial(set_status, active=active))
        p.add_argument("worker", metavar="NAME|ID", help="the Worker, by name, id or short id")
