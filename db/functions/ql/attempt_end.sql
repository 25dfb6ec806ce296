-- ql.attempt_end: end a live Attempt and move its Run, with one attempt event and one run event.
-- Outcome is decided here, once: a cancel intent wins (timed_out for reason timeout, else cancelled);
-- otherwise exit code 0 without an error code succeeds; any other end fails, and a failed Attempt
-- schedules a retry (retry_wait at now + retryBackoffMs) while the pinned plan's maxAttempts allows.
-- The caller holds the Run and Attempt row locks (ql.attempt_fence) and passes database time.
-- signature: ql.attempt_end(ql.runs, ql.run_attempts, integer, text, bytea, ql.actor_kind, uuid, bigint)
create or replace function ql.attempt_end(
  p_run ql.runs,
  p_attempt ql.run_attempts,
  p_exit_code integer,
  p_error_code text,
  p_completion_digest bytea,
  p_actor_kind ql.actor_kind,
  p_actor_id uuid,
  p_now_ms bigint
)
returns void
language plpgsql
as $$
declare
  v_plan jsonb;
  v_attempt_status ql.attempt_status;
  v_run_status ql.run_status;
  v_retry_at bigint;
begin
  select t.plan_json into strict v_plan from ql.task_execution_revisions t where t.id = p_run.task_revision_id;

  v_attempt_status := case
    when p_run.cancel_reason = 'timeout' then 'timed_out'
    when p_run.cancel_reason is not null then 'cancelled'
    when p_exit_code = 0 and p_error_code is null then 'succeeded'
    else 'failed'
  end;
  v_run_status := case
    when v_attempt_status <> 'failed' then v_attempt_status
    when p_run.attempt_count < coalesce((v_plan ->> 'maxAttempts')::int, 1) then 'retry_wait'
    else 'failed'
  end;
  if v_run_status = 'retry_wait' then
    v_retry_at := p_now_ms + coalesce((v_plan ->> 'retryBackoffMs')::bigint, 0);
  end if;

  update ql.run_attempts a
     set status = v_attempt_status, version = a.version + 1, callback_sequence = a.callback_sequence + 1,
         ended_at_ms = p_now_ms, exit_code = p_exit_code, error_code = p_error_code,
         completion_digest = p_completion_digest
   where a.id = p_attempt.id;
  update ql.runs r set current_attempt_id = null, retry_at_ms = v_retry_at where r.id = p_run.id;

  perform ql.run_event(
    p_run.id, null, 'attempt.' || v_attempt_status, p_actor_kind, p_actor_id, p_attempt.id,
    pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object(
      'attemptNo', p_attempt.attempt_no, 'exitCode', p_exit_code, 'errorCode', p_error_code)),
    p_now_ms, 'attempt.ended:' || p_attempt.id::text);
  perform ql.run_event(
    p_run.id, v_run_status,
    case v_run_status when 'retry_wait' then 'run.retry_scheduled' else 'run.' || v_run_status end,
    p_actor_kind, p_actor_id, p_attempt.id,
    pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object('status', v_run_status, 'retryAtMs', v_retry_at)),
    p_now_ms, 'run.after_attempt:' || p_attempt.id::text);
end;
$$;

comment on function ql.attempt_end(ql.runs, ql.run_attempts, integer, text, bytea, ql.actor_kind, uuid, bigint) is
'Ends a live Attempt (succeeded|failed|cancelled|timed_out) and moves its Run (same, or retry_wait), '
'releasing the Run''s current Attempt. Two events. Raises only on caller bugs.';
