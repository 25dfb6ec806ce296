-- Verify qinglong:ql/retention_cycles on pg
select id, started_at_ms, ended_at_ms, pages, runs_pruned, backlog_runs, finished from ql.retention_cycles where false;
select last_cycle_at_ms, backlog_runs, backlog_runs_a_day_before, behind_ms, alert from ql.retention_status where false;
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_trigger
where tgrelid = 'ql.schedule_fires'::regclass and tgname = 'schedule_fires_prune_guard';
