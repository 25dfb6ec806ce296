-- Deploy qinglong:ql/worker_presence to pg
-- FROZEN COPY of db/functions/ql/worker_presence.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql.worker_presence: how present a Worker is, as both Worker lists show it.
create or replace function ql.worker_presence(p_worker_id uuid)
returns jsonb
language sql
stable
set search_path = pg_catalog, pg_temp
-- online: it has a live
-- session whose expiry (opened or last heartbeat + ql.settings.session_ttl_ms) is still ahead of database
-- time, the test ql.attempt_fence applies. lastContactAtMs: the latest open or heartbeat of any of its
-- sessions (that session's expiry minus the current session TTL), null when it never connected. Reads only.
begin atomic
  select jsonb_build_object(
           'online', exists (select 1 from ql.worker_sessions s where s.worker_id = p_worker_id and s.status = 'live'
                               and s.expires_at_ms > ql.now_ms()),
           'lastContactAtMs', (select max(s.expires_at_ms) - st.session_ttl_ms from ql.worker_sessions s
                                where s.worker_id = p_worker_id))
    from ql.settings st;
end;

comment on function ql.worker_presence(uuid) is
'Returns {"online", "lastContactAtMs"}: a live unexpired session; its latest open or heartbeat (NULL when it '
'never connected). Never raises.';

commit;
