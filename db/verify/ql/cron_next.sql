-- Verify qinglong:ql/cron_next on pg
-- Existence, signature, owner and privileges both ways; never behaviour (that is pgTAP's).
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_proc p
join pg_catalog.pg_roles o on o.oid = p.proowner
where p.oid = 'ql.cron_next(ql.cron_spec, text, timestamptz)'::regprocedure and o.rolname = 'ql_owner';
select 1 / (not pg_catalog.has_function_privilege('public', 'ql.cron_next(ql.cron_spec, text, timestamptz)', 'execute'))::int;
select 1 / (not pg_catalog.has_function_privilege('ql_runtime', 'ql.cron_next(ql.cron_spec, text, timestamptz)', 'execute'))::int;
select 1 / (not pg_catalog.has_function_privilege('ql_scheduler', 'ql.cron_next(ql.cron_spec, text, timestamptz)', 'execute'))::int;
select 1 / (not pg_catalog.has_function_privilege('ql_readonly', 'ql.cron_next(ql.cron_spec, text, timestamptz)', 'execute'))::int;
