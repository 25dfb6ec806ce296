#!/usr/bin/env bash
# Every test: static checks, the database checks (sqitch round trip, pgTAP, plpgsql_check) on a
# throw-away PostgreSQL cluster, then pytest (unit, integration and race tests on their own cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/lint.sh
.venv/bin/python -m qinglong.devdb run --fsync off -- bash scripts/db_checks.sh
# Two processes, each with its own clusters; a test file stays in one (its module fixtures are made once).
.venv/bin/python -m pytest -n 2 --dist loadfile "$@"
