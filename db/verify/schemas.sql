-- Verify qinglong:schemas on pg
select 1 / (pg_catalog.has_schema_privilege('ql_runtime', 'ql_api', 'usage')
            and not pg_catalog.has_schema_privilege('ql_runtime', 'ql', 'usage')
            and not pg_catalog.has_schema_privilege('public', 'ql', 'usage'))::int;
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_namespace n
join pg_catalog.pg_roles r on r.oid = n.nspowner
where n.nspname in ('ql', 'ql_api') and r.rolname = 'ql_owner' having pg_catalog.count(*) = 2;
