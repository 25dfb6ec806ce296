#!/usr/bin/env bash
# Static checks: ruff (lint + format), mypy --strict over the import root and the tests, and the
# drift check of the frozen deploy copies against db/functions.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check .
.venv/bin/ruff format --check .
MYPYPATH=.venv/import-root .venv/bin/mypy -p qinglong
MYPYPATH=.venv/import-root .venv/bin/mypy tests scripts
.venv/bin/python scripts/sync_functions.py --check
echo "lint: ruff, mypy --strict and the deploy-copy drift check passed"
