-- Verify qinglong:ql/retention on pg
select run_retention_days, audit_retention_days from ql.settings where false;
select table_name, total_bytes, partitions, rows_estimate, oldest_at_ms from ql.table_sizes where false;
select 1 / (c.relkind = 'p')::int from pg_catalog.pg_class c where c.oid = 'ql.run_events'::regclass;
select 1 / (c.relkind = 'p')::int from pg_catalog.pg_class c where c.oid = 'ql.security_audit'::regclass;
select 1 / pg_catalog.has_table_privilege('ql_readonly', 'ql.table_sizes', 'select')::int;
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_indexes where schemaname = 'ql' and indexname = 'runs_ended_idx';
