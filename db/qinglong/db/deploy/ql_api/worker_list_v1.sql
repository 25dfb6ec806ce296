-- Deploy qinglong:ql_api/worker_list_v1 to pg
-- FROZEN COPY of db/functions/ql_api/worker_list_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.worker_list_v1: every enrolled Worker, by name then id, as the operator's `qinglong worker list` shows it.
-- online: the Worker has a live session whose expiry (opened or last heartbeat + ql.settings.session_ttl_ms) is
-- still ahead of database time — the same test ql.attempt_fence applies. lastContactAtMs: the latest open or
-- heartbeat of any of its sessions (that session's expiry minus the current session TTL), null when it never
-- connected. activeAttempts: its Attempts not yet ended (claimed, starting, running). Reads only.
-- Not granted to ql_runtime (operators call it as a DBA).
-- Returns {"status":"listed","workers":[{"workerId","name","pool","generation","status","online",
--          "lastContactAtMs","activeAttempts"}…]}.
-- signature: ql_api.worker_list_v1()
create or replace function ql_api.worker_list_v1()
returns jsonb
language sql
stable
security definer
set search_path = pg_catalog, pg_temp
begin atomic
  select jsonb_build_object('status', 'listed', 'workers', coalesce(jsonb_agg(jsonb_build_object(
           'workerId', w.id, 'name', w.name, 'pool', w.pool, 'generation', w.generation, 'status', w.status,
           'online', exists (select 1 from ql.worker_sessions s where s.worker_id = w.id and s.status = 'live'
                               and s.expires_at_ms > ql.now_ms()),
           'lastContactAtMs', (select max(s.expires_at_ms) - st.session_ttl_ms from ql.worker_sessions s
                                where s.worker_id = w.id),
           'activeAttempts', (select count(*) from ql.run_attempts a
                               where a.worker_id = w.id and a.ended_at_ms is null))
         order by w.name, w.id), '[]'::jsonb))
    from ql.workers w cross join ql.settings st;
end;

comment on function ql_api.worker_list_v1() is
'Every enrolled Worker: id, name, pool, generation, status, online (a live unexpired session), lastContactAtMs, '
'activeAttempts. Results: listed. Operators only.';
revoke all on function ql_api.worker_list_v1() from public;

commit;
