-- Verify qinglong:ql/run_work_indexes on pg
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_indexes
where schemaname = 'ql' and indexname in ('runs_cancel_pending_idx', 'runs_retry_due_idx')
having pg_catalog.count(*) = 2;
