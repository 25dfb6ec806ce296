#!/usr/bin/env bash
# Static checks: ruff (lint + format), mypy --strict over every distribution's package, the tests, scripts and
# bench, and the drift check of the frozen deploy copies against db/functions.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check .
.venv/bin/ruff format --check .
packages=()
for project in */pyproject.toml; do packages+=(-p "qinglong.${project%/pyproject.toml}"); done
.venv/bin/mypy "${packages[@]}"
.venv/bin/mypy tests scripts bench
.venv/bin/python scripts/sync_functions.py --check
echo "lint: ruff, mypy --strict and the deploy-copy drift check passed"
