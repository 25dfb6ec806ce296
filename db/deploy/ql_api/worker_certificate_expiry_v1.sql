-- Deploy qinglong:ql_api/worker_certificate_expiry_v1 to pg
-- FROZEN COPY of db/functions/ql_api/worker_certificate_expiry_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.worker_certificate_expiry_v1: the earliest certificate expiry among active Workers, for the shell's /metrics.
create or replace function ql_api.worker_certificate_expiry_v1()
returns jsonb
language sql
stable
security definer
set search_path = pg_catalog, pg_temp
-- The metric qinglong_worker_certificates_earliest_expiry_timestamp_seconds: one series, no
-- Worker named: `qinglong worker list` names them. Workers whose expiry was never recorded are counted apart.
-- Reads only. Granted to ql_runtime: the answer holds no id, name or fingerprint.
begin atomic
  select jsonb_build_object('status', 'listed', 'earliestNotAfterMs', min(w.cert_not_after_ms),
                            'unrecorded', count(*) filter (where w.cert_not_after_ms is null))
    from ql.workers w
   where w.status = 'active';
end;

comment on function ql_api.worker_certificate_expiry_v1() is
'Returns listed {earliestNotAfterMs, unrecorded}. Never raises.';
grant execute on function ql_api.worker_certificate_expiry_v1() to ql_runtime;

commit;
