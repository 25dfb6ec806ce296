-- Verify qinglong:ql/runs_retry_offerable_idx on pg
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_indexes
where schemaname = 'ql' and tablename = 'runs' and indexname = 'runs_retry_offerable_idx';
