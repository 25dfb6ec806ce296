-- Verify qinglong:ql/task_status on pg
select status from ql.tasks where false;
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_enum e
where e.enumtypid = 'ql.fence_reason'::regtype and e.enumlabel = 'task_disabled';
