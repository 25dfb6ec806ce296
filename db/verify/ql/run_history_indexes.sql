-- Verify qinglong:ql/run_history_indexes on pg
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_indexes
where schemaname = 'ql' and tablename = 'runs'
  and indexname in ('runs_history_idx', 'runs_history_task_idx', 'runs_history_status_idx',
                    'runs_history_task_status_idx')
having pg_catalog.count(*) = 4;
select 1 / (not exists (select from pg_catalog.pg_indexes where schemaname = 'ql' and indexname = 'runs_project_idx'))::int;
