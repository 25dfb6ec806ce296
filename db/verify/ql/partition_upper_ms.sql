-- Verify qinglong:ql/partition_upper_ms on pg
-- Existence, signature, owner and privileges both ways; never behaviour (that is pgTAP's).
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_proc p
join pg_catalog.pg_roles o on o.oid = p.proowner
where p.oid = 'ql.partition_upper_ms(regclass)'::regprocedure and o.rolname = 'ql_owner';
select 1 / (not pg_catalog.has_function_privilege('public', 'ql.partition_upper_ms(regclass)', 'execute'))::int;
select 1 / (not pg_catalog.has_function_privilege('ql_runtime', 'ql.partition_upper_ms(regclass)', 'execute'))::int;
select 1 / (not pg_catalog.has_function_privilege('ql_scheduler', 'ql.partition_upper_ms(regclass)', 'execute'))::int;
select 1 / (not pg_catalog.has_function_privilege('ql_readonly', 'ql.partition_upper_ms(regclass)', 'execute'))::int;
