-- Verify qinglong:ql/notify_schedule_skipped on pg
-- Existence, signature, owner and privileges both ways; never behaviour (that is pgTAP's).
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_proc p
join pg_catalog.pg_roles o on o.oid = p.proowner
where p.oid = 'ql.notify_schedule_skipped()'::regprocedure and o.rolname = 'ql_owner';
select 1 / (not pg_catalog.has_function_privilege('public', 'ql.notify_schedule_skipped()', 'execute'))::int;
select 1 / (not pg_catalog.has_function_privilege('ql_runtime', 'ql.notify_schedule_skipped()', 'execute'))::int;
select 1 / (not pg_catalog.has_function_privilege('ql_scheduler', 'ql.notify_schedule_skipped()', 'execute'))::int;
select 1 / (not pg_catalog.has_function_privilege('ql_readonly', 'ql.notify_schedule_skipped()', 'execute'))::int;
