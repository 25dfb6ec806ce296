-- Verify qinglong:ql/cron_spec on pg
select minutes, hours, days_of_month, months, days_of_week, dom_restricted, dow_restricted, wildcard_time
from (select null::ql.cron_spec as s) x, lateral (select (x.s).*) y where false;
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_type t
join pg_catalog.pg_namespace n on n.oid = t.typnamespace
join pg_catalog.pg_roles o on o.oid = t.typowner
where n.nspname = 'ql' and t.typname = 'cron_spec' and o.rolname = 'ql_owner';
