-- Revert qinglong:ql/lifecycle_lean from pg: the indexes as ql/run_history_indexes, ql/run_work_indexes and
-- ql/runs_retry_offerable_idx made them.
begin;
set local role ql_owner;

drop index ql.runs_offerable_idx;
drop index ql.runs_retry_offerable_idx;
drop index ql.runs_cancel_pending_idx;

create index runs_offerable_idx on ql.runs (pool, queued_at_ms, id)
  where status = 'queued' and current_attempt_id is null and cancel_requested_at_ms is null;
create index runs_retry_offerable_idx on ql.runs (pool, retry_at_ms, id)
  where status = 'retry_wait' and current_attempt_id is null and cancel_requested_at_ms is null;
create index runs_cancel_pending_idx on ql.runs ((current_attempt_id is not null), cancel_requested_at_ms, id)
  where cancel_requested_at_ms is not null
    and status in ('created', 'queued', 'waiting_approval', 'retry_wait', 'lost');
create index runs_history_task_idx on ql.runs (project_id, task_id, created_at_ms, id);
comment on index ql.runs_history_task_idx is 'ql_api.run_list_v1 filtered by task';
create index runs_history_idx on ql.runs (project_id, created_at_ms, id);
comment on index ql.runs_history_idx is 'ql_api.run_list_v1 without a task or status filter';
comment on index ql.runs_history_status_idx is 'ql_api.run_list_v1 filtered by status';
comment on index ql.runs_history_task_status_idx is 'ql_api.run_list_v1 filtered by task and status';
comment on table ql.run_attempts is
'One try of a Run on one Worker. version bumps with every change, including each Lease renewal.';

commit;
