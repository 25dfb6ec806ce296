-- Revert qinglong:ql/run_history_indexes from pg
begin;
set local role ql_owner;
create index runs_project_idx on ql.runs (project_id, created_at_ms);
drop index ql.runs_history_task_status_idx;
drop index ql.runs_history_status_idx;
drop index ql.runs_history_task_idx;
drop index ql.runs_history_idx;
commit;
