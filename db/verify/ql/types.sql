-- Verify qinglong:ql/types on pg
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_type t
join pg_catalog.pg_namespace n on n.oid = t.typnamespace
where n.nspname = 'ql' and t.typtype = 'd'
  and t.typname in ('run_status', 'attempt_status', 'cancel_reason', 'actor_kind', 'ms', 'sha256')
having pg_catalog.count(*) = 6;
