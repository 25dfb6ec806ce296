"""`qinglong pool`: list the pools (Workers' and set ones) with the Lease length their Attempts get, and set or clear a
pool's Lease length (decision 0028). Touches the database (DBA connection) only.
"""

from __future__ import annotations

import argparse

from qinglong.cli import operators as op
from qinglong.cli.common import Commands, Failure, catalogue_command, group
from qinglong.cli.connect import admin_transaction
from qinglong.cli.printing import emit, table

LEASE_MIN_MS = 1000
LEASE_MAX_MS = 3_600_000


def lease_ms(text: str) -> int:
    """A Lease length in ms, 1000 to 3600000 (the database checks it again)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of ms: {text}") from None
    if not LEASE_MIN_MS <= value <= LEASE_MAX_MS:
        raise argparse.ArgumentTypeError(f"a Lease length is {LEASE_MIN_MS} to {LEASE_MAX_MS} ms, not {value}")
    return value


def list_pools(args: argparse.Namespace) -> int:
    listed = admin_transaction(args, lambda tx: tx.call(op.pool_list_v1))
    rows = [
        (p["pool"], p["leaseMs"], "pool" if p["poolOwn"] else "default", p["workers"], p["liveRuns"])
        for p in listed["pools"]
    ]
    text = table(("POOL", "LEASE MS", "FROM", "WORKERS", "LIVE RUNS"), rows)
    return emit(args, {"defaultLeaseMs": listed["defaultLeaseMs"], "pools": listed["pools"]}, text)


def set_lease(args: argparse.Namespace) -> int:
    if (args.ms is None) == (not args.default):
        raise Failure("give a Lease length in ms, or --default to clear the pool's own")
    done = admin_transaction(args, lambda tx: tx.call(op.pool_lease_set_v1, p_pool=args.pool, p_lease_ms=args.ms))
    how = "its own" if done["poolOwn"] else "the default"
    changed = "" if done["changed"] else " (unchanged)"
    sentence = (
        f"pool {done['pool']}: Lease {done['leaseMs']} ms ({how}){changed}; "
        "Attempts claimed from now on get it, running ones keep theirs"
    )
    return emit(args, done, sentence)


def register(top: Commands) -> None:
    pool = group(top, "pool", "the pools' Lease lengths")
    catalogue_command(pool, "list", "every pool a Worker or a setting names: its Lease length, Workers, live Runs",
                      list_pools)  # fmt: skip
    p = catalogue_command(
        pool,
        "lease",
        "set a pool's Lease length: longer rides out longer losses of the control plane, shorter recovers a dead "
        "Worker's Runs sooner",
        set_lease,
    )
    p.add_argument("pool", help="the pool's name ([a-z0-9_-], 1 to 64)")
    p.add_argument("ms", nargs="?", type=lease_ms, help="the Lease length in ms, 1000 to 3600000")
    p.add_argument("--default", action="store_true", help="clear the pool's own length: it takes the global one")
