-- Verify qinglong:ql/invalid_reasons_run_list on pg
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_enum e
where e.enumtypid = 'ql.invalid_reason'::regtype and e.enumlabel in ('status', 'time_range', 'cursor')
having pg_catalog.count(*) = 3;
