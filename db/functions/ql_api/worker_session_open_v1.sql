-- ql_api.worker_session_open_v1: open a Worker's session, replacing its live one (qinglong/worker-session@v1).
-- Lock order: worker (FOR NO KEY UPDATE) → its live session (FOR UPDATE).
create or replace function ql_api.worker_session_open_v1(
  p_worker_id uuid,
  p_worker_generation bigint,
  p_cert_fingerprint bytea,
  p_capacity integer
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- The shell calls it after the mTLS handshake; the certificate fingerprint must be the Worker's current one or
-- the one its last renewal replaced (ql_api.worker_certificate_renew_v1: the new files may not be installed yet).
declare
  v_worker ql.workers;
  v_old uuid;
  v_now bigint;
  v_session ql.worker_sessions;
begin
  if p_worker_id is null then return ql.outcome('invalid', 'worker_id'); end if;
  if p_worker_generation is null or p_worker_generation not between 1 and ql.max_safe_integer() then
    return ql.outcome('invalid', 'worker_generation');
  end if;
  if p_cert_fingerprint is null or octet_length(p_cert_fingerprint) <> 32 then
    return ql.outcome('invalid', 'cert_fingerprint');
  end if;
  if p_capacity is null or p_capacity not between 1 and 1024 then
    return ql.outcome('invalid', 'capacity');
  end if;

  select * into v_worker from ql.workers w where w.id = p_worker_id for no key update;
  if not found then return ql.outcome('not_found', 'worker'); end if;
  if v_worker.status <> 'active' then return ql.outcome('fenced', 'worker_disabled'); end if;
  if v_worker.generation <> p_worker_generation then return ql.outcome('fenced', 'stale_generation'); end if;
  if p_cert_fingerprint is distinct from v_worker.cert_fingerprint
     and p_cert_fingerprint is distinct from v_worker.previous_cert_fingerprint then
    return ql.outcome('fenced', 'certificate_mismatch');
  end if;

  select s.id into v_old from ql.worker_sessions s where s.worker_id = p_worker_id and s.status = 'live' for update;
  v_now := ql.now_ms();
  if v_old is not null then
    update ql.worker_sessions s set status = 'replaced', ended_at_ms = v_now where s.id = v_old;
  end if;

  insert into ql.worker_sessions (worker_id, worker_generation, capacity, opened_at_ms, expires_at_ms)
  select p_worker_id, p_worker_generation, p_capacity, v_now, v_now + st.session_ttl_ms from ql.settings st
  returning * into v_session;

  return jsonb_build_object(
    'status', 'opened', 'sessionId', v_session.id, 'workerGeneration', v_session.worker_generation,
    'capacity', v_session.capacity, 'openedAtMs', v_session.opened_at_ms,
    'expiresAtMs', v_session.expires_at_ms, 'replacedSessionId', v_old);
end;
$$;

comment on function ql_api.worker_session_open_v1(uuid, bigint, bytea, integer) is
'Returns opened {sessionId, workerGeneration, capacity, openedAtMs, expiresAtMs, replacedSessionId} | invalid | '
'not_found (worker) | fenced (worker_disabled, stale_generation, certificate_mismatch). Raises nothing on '
'input.';
grant execute on function ql_api.worker_session_open_v1(uuid, bigint, bytea, integer) to ql_runtime;
