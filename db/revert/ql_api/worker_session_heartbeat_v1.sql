-- Revert qinglong:ql_api/worker_session_heartbeat_v1 from pg
-- RESTORES the previous instance: the body of deploy/ql_api/worker_session_heartbeat_v1@v0.1.0.sql with its grants,
-- written by scripts/sync_functions.py; never edit this one.
begin;
set local role ql_owner;
revoke all on function ql_api.worker_session_heartbeat_v1(uuid, uuid, bigint) from public, ql_runtime, ql_scheduler, ql_readonly;

-- ql_api.worker_session_heartbeat_v1: keep a live Worker session alive for another session TTL.
-- Lock order: session (FOR NO KEY UPDATE).
-- Returns {"status":"alive","sessionId","expiresAtMs"} or {"status":"invalid"|"fenced","reason"}.
-- signature: ql_api.worker_session_heartbeat_v1(uuid, uuid, bigint)
-- grant execute: ql_runtime
create or replace function ql_api.worker_session_heartbeat_v1(
  p_worker_id uuid,
  p_session_id uuid,
  p_worker_generation bigint
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_session ql.worker_sessions;
  v_now bigint;
begin
  if p_worker_id is null then return ql.outcome('invalid', 'worker_id'); end if;
  if p_session_id is null then return ql.outcome('invalid', 'session_id'); end if;
  if p_worker_generation is null or p_worker_generation not between 1 and 9007199254740991 then
    return ql.outcome('invalid', 'worker_generation');
  end if;

  select * into v_session from ql.worker_sessions s where s.id = p_session_id for no key update;
  v_now := ql.now_ms();
  if v_session.id is null or v_session.worker_id <> p_worker_id or v_session.status <> 'live' then
    return ql.outcome('fenced', 'stale_session');
  end if;
  if v_session.expires_at_ms <= v_now then return ql.outcome('fenced', 'session_expired'); end if;
  if v_session.worker_generation <> p_worker_generation then
    return ql.outcome('fenced', 'stale_generation');
  end if;

  update ql.worker_sessions s set expires_at_ms = v_now + st.session_ttl_ms
    from ql.settings st where s.id = p_session_id
  returning s.expires_at_ms into v_session.expires_at_ms;
  return jsonb_build_object('status', 'alive', 'sessionId', p_session_id, 'expiresAtMs', v_session.expires_at_ms);
end;
$$;

comment on function ql_api.worker_session_heartbeat_v1(uuid, uuid, bigint) is
'Extends a live session by the session TTL. Results: alive | invalid | fenced (stale_session, session_expired, stale_generation).';
revoke all on function ql_api.worker_session_heartbeat_v1(uuid, uuid, bigint) from public;
grant execute on function ql_api.worker_session_heartbeat_v1(uuid, uuid, bigint) to ql_runtime;

commit;
