-- Deploy qinglong:ql/run_history_indexes to pg
-- FROZEN COPY of db/schema/ql/run_history_indexes.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
-- The keyset indexes of ql_api.run_list_v1 (a Project's Runs, newest first, by (created_at_ms, id)):
-- one per filter combination, so that every page is an index range scan that reads what it returns,
-- with the time range and the cursor as index conditions. project_id leads every key, so another
-- Project's Runs are never read. The first replaces runs_project_idx (project_id, created_at_ms).
-- None of these columns is written by a Lease renewal (renewals update ql.run_leases only).
-- The DROP comes first: it takes ql.runs' ACCESS EXCLUSIVE lock before CREATE INDEX takes its SHARE lock, so
-- this change never upgrades a lock it holds and cannot deadlock with live traffic (it waits for it, once).
begin;
set local role ql_owner;

drop index ql.runs_project_idx;
create index runs_history_idx on ql.runs (project_id, created_at_ms, id);
create index runs_history_task_idx on ql.runs (project_id, task_id, created_at_ms, id);
create index runs_history_status_idx on ql.runs (project_id, status, created_at_ms, id);
create index runs_history_task_status_idx on ql.runs (project_id, task_id, status, created_at_ms, id);
comment on index ql.runs_history_idx is 'ql_api.run_list_v1 without a task or status filter';
comment on index ql.runs_history_task_idx is 'ql_api.run_list_v1 filtered by task';
comment on index ql.runs_history_status_idx is 'ql_api.run_list_v1 filtered by status';
comment on index ql.runs_history_task_status_idx is 'ql_api.run_list_v1 filtered by task and status';

commit;
