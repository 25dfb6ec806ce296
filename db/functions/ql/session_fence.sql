-- ql.session_fence: the fence of a Worker's session: live, of this Worker, unexpired at p_now_ms, opened under p_worker_generation.
create or replace function ql.session_fence(
  p_session ql.worker_sessions,   -- as read (or locked) by the caller; all NULL when there is none
  p_worker_id uuid,
  p_worker_generation bigint,
  p_now_ms bigint
)
returns jsonb
language sql
stable
parallel safe
return case
  when (p_session).id is null or (p_session).worker_id <> p_worker_id or (p_session).status <> 'live'
    then ql.outcome('fenced', 'stale_session')
  when (p_session).expires_at_ms <= p_now_ms
    then ql.outcome('fenced', 'session_expired')
  when (p_session).worker_generation <> p_worker_generation
    then ql.outcome('fenced', 'stale_generation')
end;

comment on function ql.session_fence(ql.worker_sessions, uuid, bigint, bigint) is
'Returns NULL when the session holds, else {"status":"fenced","reason":"stale_session"|"session_expired"|'
'"stale_generation"}. Never raises.';
