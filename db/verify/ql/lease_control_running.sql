-- Verify qinglong:ql/lease_control_running on pg
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_enum e
where e.enumtypid = 'ql.invalid_reason'::regtype and e.enumlabel = 'running';
