#!/usr/bin/env bash
# For now: a local PostgreSQL 15 (fsync on, pg_cron preloaded) in a temporary folder, everything deployed
# with sqitch, and how to connect. It keeps running until Ctrl-C, then stops and cleans up.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m qinglong.devdb run --fsync on -- bash -c '
  set -euo pipefail
  psql -qAt -v ON_ERROR_STOP=1 -d postgres -c "create database qinglong"
  sqitch deploy --quiet "db:pg://${PGUSER}@${PGHOST}:${PGPORT}/qinglong"
  echo
  echo "Qinglong control-plane database is up (sqitch deployed, $(psql -qAt -d qinglong -c "select count(*) from pg_proc p join pg_namespace n on n.oid = p.pronamespace where n.nspname = '"'"'ql_api'"'"'") API functions)."
  echo "  connect as the runtime role:  psql \"host=${PGHOST} port=${PGPORT} user=ql_runtime dbname=qinglong\""
  echo "  connect as the superuser:     psql \"host=${PGHOST} port=${PGPORT} user=postgres dbname=qinglong\""
  if [ -t 0 ] && [ -z "${CI:-}" ]; then
    echo "Press Ctrl-C to stop and remove it."
    while sleep 3600; do :; done
  fi
'
