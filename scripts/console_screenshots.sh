#!/usr/bin/env bash
# Regenerates docs/console-runs.png, docs/console-run.png and docs/console-task.png (README.md shows them): the web
# console's browser tests (tests/e2e/test_console.py) against a real system, saving the Runs page, a retried Run's
# page and a task's page with its schedule preview as they pass.
# Touches those three files, and what the tests touch (a temporary folder, loopback ports, child processes).
set -euo pipefail
cd "$(dirname "$0")/.."
QINGLONG_CONSOLE_SCREENSHOTS=1 .venv/bin/python -m pytest tests/e2e/test_console.py -q
ls -l docs/console-runs.png docs/console-run.png docs/console-task.png
