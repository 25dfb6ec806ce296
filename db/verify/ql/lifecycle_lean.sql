-- Verify qinglong:ql/lifecycle_lean on pg: no index of ql.runs names current_attempt_id; no task-only or unfiltered history index.
select 1 / (not exists (select from pg_catalog.pg_index i
                         where i.indrelid = 'ql.runs'::regclass
                           and (pg_catalog.pg_get_indexdef(i.indexrelid) ~ 'current_attempt_id')))::int;
select 1 / (to_regclass('ql.runs_history_task_idx') is null)::int;
select 1 / (to_regclass('ql.runs_history_idx') is null)::int;
