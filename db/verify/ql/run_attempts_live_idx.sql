-- Verify qinglong:ql/run_attempts_live_idx on pg
-- The live-Attempt index is keyed on ended_at_ms, and no index of ql.run_attempts names its status.
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_indexes
where schemaname = 'ql' and indexname = 'run_attempts_live_worker_idx' and indexdef like '%WHERE (ended_at_ms IS NULL)'
having pg_catalog.count(*) = 1;
select 1 / (pg_catalog.count(*) = 0)::int from pg_catalog.pg_indexes
where schemaname = 'ql' and tablename = 'run_attempts' and indexdef like '%status%';
