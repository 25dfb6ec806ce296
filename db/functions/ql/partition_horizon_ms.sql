-- ql.partition_horizon_ms: where the partitions of ql.run_events or ql.security_audit end first (ms).
create or replace function ql.partition_horizon_ms()
returns bigint
language sql
stable
-- The smaller, over the two tables, of the greatest upper bound among each table's partitions: a row stamped at or
-- after it finds no partition (SQLSTATE 23514). Reads only the catalog.
return (select pg_catalog.min(t.upper_ms)
          from (select pg_catalog.max(ql.partition_upper_ms(i.inhrelid::regclass)) as upper_ms
                  from pg_catalog.pg_inherits i
                 where i.inhparent in ('ql.run_events'::regclass, 'ql.security_audit'::regclass)
                 group by i.inhparent) t);

comment on function ql.partition_horizon_ms() is
'Returns the end (ms, exclusive) of the partitions of the table whose partitions end first; NULL when a table '
'has none. Never raises.';
