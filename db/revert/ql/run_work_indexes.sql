-- Revert qinglong:ql/run_work_indexes from pg
begin;
drop index ql.runs_retry_due_idx;
drop index ql.runs_cancel_pending_idx;
commit;
