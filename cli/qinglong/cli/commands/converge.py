"""`qinglong converge --once`: one convergence cycle, what pg_cron runs every minute (a top-level command).
Touches the database (DBA connection from --dsn or QINGLONG_DSN).
"""

from __future__ import annotations

import argparse

from qinglong.cli.common import EXIT_UNAVAILABLE, Commands, Failure, dsn_option, positive
from qinglong.cli.connect import dsn


def converge(args: argparse.Namespace) -> int:
    from qinglong.cli.admin import Refused, Unavailable, converge_once

    if not args.once:
        raise Failure("only --once is supported: pg_cron (or your scheduler) owns the cadence")
    try:
        converge_once(dsn(args), args.page_size, args.max_pages, args.grace_ms)
    except Unavailable as exc:
        raise Failure(f"database unreachable: {exc}", EXIT_UNAVAILABLE) from None
    except Refused as exc:
        raise Failure(f"converge refused: {exc}") from None
    print("one convergence cycle done")
    return 0


def register(top: Commands) -> None:
    p = top.add_parser("converge", help="one convergence cycle (what pg_cron runs every minute)")
    dsn_option(p)
    p.add_argument("--once", action="store_true", required=True, help="one cycle (the only mode)")
    p.add_argument("--page-size", type=positive, default=64, help="Runs per page (default 64)")
    p.add_argument("--max-pages", type=positive, default=16, help="pages in this cycle at most (default 16)")
    p.add_argument(
        "--grace-ms",
        type=int,
        default=30000,
        help="how long past its lease expiry a running Attempt is declared lost (default 30000; at least "
        "ql.settings.worker_stop_grace_ms + 1000, 6000 by default)",
    )
    p.set_defaults(handler=converge)
