#!/usr/bin/env bash
# Build the wheel of every distribution (one per top-level folder) into dist/, or into the folder given.
# Siblings require each other by name and version, so these wheels install on any machine; a Worker
# needs only its own, the wire contracts' and aiohttp (README.md, "Installing outside the checkout").
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
folders=()
for project in */pyproject.toml; do folders+=("./${project%/pyproject.toml}"); done
.venv/bin/python -m pip wheel -q --no-deps --no-build-isolation -w "$out" "${folders[@]}"
ls "$out"/*.whl
