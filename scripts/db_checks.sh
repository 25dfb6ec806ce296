#!/usr/bin/env bash
# Database checks against the cluster in PGHOST/PGPORT (started by `python -m qinglong.devdb run`):
# sqitch deploy → verify → revert to nothing → deploy again, then pgTAP (pg_prove) over db/test
# and plpgsql_check over every function.
set -euo pipefail
cd "$(dirname "$0")/.."
db=qinglong_checks
target="db:pg://${PGUSER}@${PGHOST}:${PGPORT}/${db}"
psql -qAt -v ON_ERROR_STOP=1 -d postgres -c "create database ${db}"
sqitch() { command sqitch "$@"; }
sqitch deploy "$target"
sqitch verify "$target"
sqitch revert -y "$target"
sqitch deploy "$target"
psql -qAt -v ON_ERROR_STOP=1 -d "$db" -c "create extension pgtap" -c "create extension plpgsql_check"
pg_prove -d "$db" --recurse --ext .sql db/test
# plpgsql_check: every PL/pgSQL function of ql and ql_api, errors and warnings both fail.
problems=$(psql -qAt -v ON_ERROR_STOP=1 -d "$db" <<'SQL'
select p.oid::regprocedure || ': ' || c.level || ' ' || c.message
from pg_catalog.pg_proc p
join pg_catalog.pg_namespace n on n.oid = p.pronamespace
join pg_catalog.pg_language l on l.oid = p.prolang and l.lanname = 'plpgsql'
cross join lateral plpgsql_check_function_tb(p.oid,
  relid => case when p.prorettype = 'trigger'::regtype  -- the table it is attached to (run_events if none)
                then coalesce((select t.tgrelid from pg_catalog.pg_trigger t where t.tgfoid = p.oid limit 1),
                              'ql.run_events'::regclass) else 0 end,
  extra_warnings => false) c
where n.nspname in ('ql', 'ql_api') and c.level in ('error', 'warning');
SQL
)
if [ -n "$problems" ]; then
  echo "plpgsql_check found problems:"; echo "$problems"; exit 1
fi
echo "plpgsql_check: every ql/ql_api PL/pgSQL function is clean"
