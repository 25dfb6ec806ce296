-- ql.retry_decision: what a Run becomes after its Attempt ended without success (failed or lost).
-- The retry authority, in one place: while the pinned plan's maxAttempts allows another Attempt the
-- Run waits in retry_wait until now + retryBackoffMs; otherwise it ends failed. A cancel intent is
-- decided by the callers before they ask (an intent always wins over a retry).
-- signature: ql.retry_decision(ql.runs, bigint)
create or replace function ql.retry_decision(p_run ql.runs, p_now_ms bigint, out status ql.run_status, out retry_at_ms bigint)
language sql
stable
as $$
  select case when (p_run).attempt_count < coalesce((t.plan_json ->> 'maxAttempts')::int, 1) then 'retry_wait' else 'failed' end,
         case when (p_run).attempt_count < coalesce((t.plan_json ->> 'maxAttempts')::int, 1)
              then p_now_ms + coalesce((t.plan_json ->> 'retryBackoffMs')::bigint, 0) end
    from ql.task_execution_revisions t
   where t.id = (p_run).task_revision_id
$$;

comment on function ql.retry_decision(ql.runs, bigint) is
'retry_wait with retry_at_ms = now + retryBackoffMs while attempt_count < maxAttempts (default 1), else failed. Pure read.';
