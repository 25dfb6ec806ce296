-- ql.attempt_end: end a live Attempt and move its Run, with one attempt event and one run event.
create or replace function ql.attempt_end(
  p_run ql.runs,
  p_attempt ql.run_attempts,
  p_exit_code integer,
  p_error_code text,
  p_completion_digest bytea,
  p_actor_kind ql.actor_kind,
  p_actor_id uuid,
  p_now_ms bigint,
  p_attempt_event_id uuid default null,
  p_run_event_id uuid default null
)
returns void
language plpgsql
volatile
as $$
-- Outcome is decided here, once: a cancel intent wins (timed_out for reason timeout, else cancelled);
-- otherwise exit code 0 without an error code succeeds; any other end fails, and a failed Attempt
-- schedules a retry (retry_wait at now + retryBackoffMs) while the pinned plan's maxAttempts allows.
-- The caller holds the Run and Attempt row locks (ql.attempt_fence) and passes database time.
-- The Run is written once (one UPDATE makes its move and takes both events' sequences).
-- Convergence passes stable event ids (decision 0000 (ADR-0118 §7)); everyone else gets fresh server ids.
declare
  v_attempt_status ql.attempt_status;
  v_run_status ql.run_status;
  v_retry_at bigint;
  v_sequence bigint;
begin
  v_attempt_status := case
    when p_run.cancel_reason = 'timeout' then 'timed_out'
    when p_run.cancel_reason is not null then 'cancelled'
    when p_exit_code = 0 and p_error_code is null then 'succeeded'
    else 'failed'
  end;
  if v_attempt_status = 'failed' then
    select d.status, d.retry_at_ms into v_run_status, v_retry_at from ql.retry_decision(p_run, p_now_ms) d;
  else
    v_run_status := v_attempt_status;
  end if;

  update ql.run_attempts a
     set status = v_attempt_status, version = a.version + 1,
         callback_sequence = a.callback_sequence + case when p_actor_kind = 'worker' then 1 else 0 end,
         ended_at_ms = p_now_ms, exit_code = p_exit_code, error_code = p_error_code,
         completion_digest = p_completion_digest
   where a.id = p_attempt.id;
  -- The Run's one write: its move, and the sequences (and versions) of both events (ql.run_event_insert).
  update ql.runs r
     set current_attempt_id = null, retry_at_ms = v_retry_at, status = v_run_status,
         ended_at_ms = case when ql.is_terminal(v_run_status) then coalesce(r.ended_at_ms, p_now_ms) end,
         version = r.version + 2, event_sequence = r.event_sequence + 2
   where r.id = p_run.id
  returning r.event_sequence into v_sequence;

  perform ql.run_event_insert(
    p_run.id, v_sequence - 1, p_run.created_at_ms, 'attempt.' || v_attempt_status, p_actor_kind, p_actor_id, p_attempt.id,
    pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object(
      'attemptNo', p_attempt.attempt_no, 'exitCode', p_exit_code, 'errorCode', p_error_code)),
    p_now_ms, 'attempt.ended:' || p_attempt.id::text, p_attempt_event_id);
  perform ql.run_event_insert(
    p_run.id, v_sequence, p_run.created_at_ms,
    case v_run_status when 'retry_wait' then 'run.retry_scheduled' else 'run.' || v_run_status end,
    p_actor_kind, p_actor_id, p_attempt.id,
    pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object('status', v_run_status, 'retryAtMs', v_retry_at)),
    p_now_ms, 'run.after_attempt:' || p_attempt.id::text, p_run_event_id);
end;
$$;

comment on function ql.attempt_end(ql.runs, ql.run_attempts, integer, text, bytea, ql.actor_kind, uuid, bigint, uuid, uuid) is
'Returns nothing: the Attempt ends succeeded | failed | cancelled | timed_out, its Run the same or retry_wait, '
'its current Attempt released. Raises only on a caller bug.';
