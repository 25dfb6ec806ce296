-- Verify qinglong:ql/session_fence on pg
-- Existence, signature, owner and privileges both ways; never behaviour (that is pgTAP's).
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_proc p
join pg_catalog.pg_roles o on o.oid = p.proowner
where p.oid = 'ql.session_fence(ql.worker_sessions, uuid, bigint, bigint)'::regprocedure and o.rolname = 'ql_owner';
select 1 / (not pg_catalog.has_function_privilege('public', 'ql.session_fence(ql.worker_sessions, uuid, bigint, bigint)', 'execute'))::int;
select 1 / (not pg_catalog.has_function_privilege('ql_runtime', 'ql.session_fence(ql.worker_sessions, uuid, bigint, bigint)', 'execute'))::int;
select 1 / (not pg_catalog.has_function_privilege('ql_scheduler', 'ql.session_fence(ql.worker_sessions, uuid, bigint, bigint)', 'execute'))::int;
select 1 / (not pg_catalog.has_function_privilege('ql_readonly', 'ql.session_fence(ql.worker_sessions, uuid, bigint, bigint)', 'execute'))::int;
