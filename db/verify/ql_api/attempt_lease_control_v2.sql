-- Verify qinglong:ql_api/attempt_lease_control_v2 on pg
-- Existence, signature, owner and privileges both ways; never behaviour (that is pgTAP's).
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_proc p
join pg_catalog.pg_roles o on o.oid = p.proowner
where p.oid = 'ql_api.attempt_lease_control_v2(uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, bigint, boolean)'::regprocedure and o.rolname = 'ql_owner'
  and p.prosecdef
  and p.proconfig = array['search_path=pg_catalog, pg_temp'];
select 1 / (not pg_catalog.has_function_privilege('public', 'ql_api.attempt_lease_control_v2(uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, bigint, boolean)', 'execute'))::int;
select 1 / (pg_catalog.has_function_privilege('ql_runtime', 'ql_api.attempt_lease_control_v2(uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, bigint, boolean)', 'execute'))::int;
select 1 / (not pg_catalog.has_function_privilege('ql_scheduler', 'ql_api.attempt_lease_control_v2(uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, bigint, boolean)', 'execute'))::int;
select 1 / (not pg_catalog.has_function_privilege('ql_readonly', 'ql_api.attempt_lease_control_v2(uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, bigint, boolean)', 'execute'))::int;
