-- Verify qinglong:ql/invalid_reasons_schedule on pg
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_enum e
where e.enumtypid = 'ql.invalid_reason'::regtype and e.enumlabel in ('cron', 'cron_never_fires', 'timezone', 'overlap')
having pg_catalog.count(*) = 4;
