#!/usr/bin/env bash
# The embedded demo (qinglong.cli.demo): its own PostgreSQL with pg_cron, sqitch deploy, a PKI, the
# shell and a Worker as real processes, five real Runs with their timelines. Cleans up after itself.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m qinglong.cli.demo
