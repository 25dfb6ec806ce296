-- Verify qinglong:ql/output_stream_end on pg
-- Existence, signature, owner and privileges both ways; never behaviour (that is pgTAP's).
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_proc p
join pg_catalog.pg_roles o on o.oid = p.proowner
where p.oid = 'ql.output_stream_end(uuid, ql.output_stream)'::regprocedure and o.rolname = 'ql_owner';
select 1 / (not pg_catalog.has_function_privilege('public', 'ql.output_stream_end(uuid, ql.output_stream)', 'execute'))::int;
select 1 / (not pg_catalog.has_function_privilege('ql_runtime', 'ql.output_stream_end(uuid, ql.output_stream)', 'execute'))::int;
select 1 / (not pg_catalog.has_function_privilege('ql_scheduler', 'ql.output_stream_end(uuid, ql.output_stream)', 'execute'))::int;
select 1 / (not pg_catalog.has_function_privilege('ql_readonly', 'ql.output_stream_end(uuid, ql.output_stream)', 'execute'))::int;
