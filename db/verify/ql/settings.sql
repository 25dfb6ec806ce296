-- Verify qinglong:ql/settings on pg
select 1 / pg_catalog.count(*)::int from ql.settings having pg_catalog.count(*) = 1;
select 1 / (not pg_catalog.has_table_privilege('ql_runtime', 'ql.settings', 'select'))::int;
