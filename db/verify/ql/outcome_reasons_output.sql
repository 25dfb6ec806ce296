-- Verify qinglong:ql/outcome_reasons_output on pg
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_enum e
where e.enumtypid = 'ql.invalid_reason'::regtype and e.enumlabel in ('stream', 'offset', 'attempt')
having pg_catalog.count(*) = 3;
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_enum e
where e.enumtypid = 'ql.not_found_reason'::regtype and e.enumlabel = 'attempt';
