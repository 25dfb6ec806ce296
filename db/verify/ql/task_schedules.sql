-- Verify qinglong:ql/task_schedules on pg
select task_id, project_id, cron, timezone, overlap, next_fire_at_ms, created_at_ms, updated_at_ms
from ql.task_schedules where false;
select task_id, fire_at_ms, project_id, decided_at_ms, outcome, run_id, blocking_run_id, caught_up
from ql.schedule_fires where false;
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_indexes
where schemaname = 'ql' and indexname in ('task_schedules_due_idx', 'runs_task_live_idx')
having pg_catalog.count(*) = 2;
