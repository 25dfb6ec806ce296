-- Verify qinglong:ql/outcome_reasons on pg
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_type t
join pg_catalog.pg_namespace n on n.oid = t.typnamespace
join pg_catalog.pg_roles o on o.oid = t.typowner
where n.nspname = 'ql' and t.typtype = 'e' and o.rolname = 'ql_owner'
  and t.typname in ('outcome_status', 'fence_reason', 'invalid_reason', 'empty_reason', 'not_found_reason')
having pg_catalog.count(*) = 5;
