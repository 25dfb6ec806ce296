-- Verify qinglong:ql/attempt_error_message on pg
select error_message from ql.run_attempts where false;
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_enum e
where e.enumtypid = 'ql.invalid_reason'::regtype and e.enumlabel = 'error_message';
