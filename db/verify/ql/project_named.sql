-- Verify qinglong:ql/project_named on pg
-- Existence, signature, owner and privileges both ways; never behaviour (that is pgTAP's).
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_proc p
join pg_catalog.pg_roles o on o.oid = p.proowner
where p.oid = 'ql.project_named(text)'::regprocedure and o.rolname = 'ql_owner';
select 1 / (not pg_catalog.has_function_privilege('public', 'ql.project_named(text)', 'execute'))::int;
select 1 / (not pg_catalog.has_function_privilege('ql_runtime', 'ql.project_named(text)', 'execute'))::int;
select 1 / (not pg_catalog.has_function_privilege('ql_scheduler', 'ql.project_named(text)', 'execute'))::int;
select 1 / (not pg_catalog.has_function_privilege('ql_readonly', 'ql.project_named(text)', 'execute'))::int;
