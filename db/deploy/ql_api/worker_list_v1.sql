-- Deploy qinglong:ql_api/worker_list_v1 to pg
-- FROZEN COPY of db/functions/ql_api/worker_list_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.worker_list_v1: every enrolled Worker, by name then id, as `qinglong worker list` shows it.
create or replace function ql_api.worker_list_v1()
returns jsonb
language sql
stable
security definer
set search_path = pg_catalog, pg_temp
-- online and lastContactAtMs: ql.worker_presence. activeAttempts: its Attempts not yet ended (claimed,
-- starting, running). certNotAfterMs: when its current certificate expires (ql/worker_certificates; null when
-- not recorded). Reads only.
begin atomic
  select jsonb_build_object('status', 'listed', 'workers', coalesce(jsonb_agg(
           ql.worker_presence(w.id) || jsonb_build_object(
             'workerId', w.id, 'name', w.name, 'pool', w.pool, 'generation', w.generation, 'status', w.status,
             'activeAttempts', (select count(*) from ql.run_attempts a
                                 where a.worker_id = w.id and a.ended_at_ms is null),
             'certNotAfterMs', w.cert_not_after_ms)
         order by w.name, w.id), '[]'::jsonb))
    from ql.workers w;
end;

comment on function ql_api.worker_list_v1() is
'Returns listed {workers: workerId, name, pool, generation, status, online, lastContactAtMs, activeAttempts, '
'certNotAfterMs}. Never raises.';

commit;
