-- Deploy qinglong:ql_api/worker_session_heartbeat_v1 to pg
-- FROZEN COPY of db/functions/ql_api/worker_session_heartbeat_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.worker_session_heartbeat_v1: keep a live Worker session alive for another session TTL.
-- Lock order: session (FOR NO KEY UPDATE).
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
  v_fence jsonb;
begin
  if p_worker_id is null then return ql.outcome('invalid', 'worker_id'); end if;
  if p_session_id is null then return ql.outcome('invalid', 'session_id'); end if;
  if p_worker_generation is null or p_worker_generation not between 1 and ql.max_safe_integer() then
    return ql.outcome('invalid', 'worker_generation');
  end if;

  select * into v_session from ql.worker_sessions s where s.id = p_session_id for no key update;
  v_now := ql.now_ms();
  v_fence := ql.session_fence(v_session, p_worker_id, p_worker_generation, v_now);
  if v_fence is not null then return v_fence; end if;

  update ql.worker_sessions s set expires_at_ms = v_now + st.session_ttl_ms
    from ql.settings st where s.id = p_session_id
  returning s.expires_at_ms into v_session.expires_at_ms;
  return jsonb_build_object('status', 'alive', 'sessionId', p_session_id, 'expiresAtMs', v_session.expires_at_ms);
end;
$$;

comment on function ql_api.worker_session_heartbeat_v1(uuid, uuid, bigint) is
'Returns alive {sessionId, expiresAtMs} | invalid | fenced (stale_session, session_expired, stale_generation). '
'Raises nothing on input.';
grant execute on function ql_api.worker_session_heartbeat_v1(uuid, uuid, bigint) to ql_runtime;

commit;
