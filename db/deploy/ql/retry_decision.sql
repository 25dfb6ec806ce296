-- Deploy qinglong:ql/retry_decision to pg
-- FROZEN COPY of db/functions/ql/retry_decision.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql.retry_decision: what a Run becomes after its Attempt ended without success (failed or lost).
create or replace function ql.retry_decision(p_run ql.runs, p_now_ms bigint, out status ql.run_status, out retry_at_ms bigint)
language sql
stable
as $$
-- The retry authority, in one place: while the pinned plan's maxAttempts allows another Attempt the
-- Run waits in retry_wait until now + retryBackoffMs; otherwise it ends failed. Every Attempt counts
-- but an abandoned claim (it never reached the Worker's process and spends no retry). A cancel intent is
-- decided by the callers before they ask (an intent always wins over a retry).
  select case when s.started < s.allowed then 'retry_wait' else 'failed' end,
         case when s.started < s.allowed then p_now_ms + coalesce((s.plan ->> 'retryBackoffMs')::bigint, 0) end
    from (select t.plan_json as plan, coalesce((t.plan_json ->> 'maxAttempts')::int, 1) as allowed,
                 (select count(*) from ql.run_attempts a
                   where a.run_id = (p_run).id and a.status <> 'abandoned') as started
            from ql.task_execution_revisions t
           where t.id = (p_run).task_revision_id) s
$$;

comment on function ql.retry_decision(ql.runs, bigint) is
'Returns (status, retry_at_ms): retry_wait at now + retryBackoffMs while fewer than maxAttempts (default 1) '
'non-abandoned Attempts exist, else failed with NULL. Never raises.';

commit;
