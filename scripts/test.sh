#!/usr/bin/env bash
# Every test: static checks, the database checks (sqitch round trip, pgTAP, plpgsql_check) on a
# throw-away PostgreSQL cluster, then pytest (unit, integration and race tests on their own cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/lint.sh
.venv/bin/python -m qinglong.devdb run --fsync off -- bash scripts/db_checks.sh
.venv/bin/python -m pytest "$@"
