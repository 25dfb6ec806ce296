-- Verify qinglong:ql/schedule_fires_ahead on pg
-- Existence, signature, owner and privileges both ways; never behaviour (that is pgTAP's).
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_proc p
join pg_catalog.pg_roles o on o.oid = p.proowner
where p.oid = 'ql.schedule_fires_ahead(text, text, bigint, integer)'::regprocedure and o.rolname = 'ql_owner';
select 1 / (not pg_catalog.has_function_privilege('public', 'ql.schedule_fires_ahead(text, text, bigint, integer)', 'execute'))::int;
select 1 / (not pg_catalog.has_function_privilege('ql_runtime', 'ql.schedule_fires_ahead(text, text, bigint, integer)', 'execute'))::int;
select 1 / (not pg_catalog.has_function_privilege('ql_scheduler', 'ql.schedule_fires_ahead(text, text, bigint, integer)', 'execute'))::int;
select 1 / (not pg_catalog.has_function_privilege('ql_readonly', 'ql.schedule_fires_ahead(text, text, bigint, integer)', 'execute'))::int;
