-- ql.partition_upper_ms: the exclusive upper bound (ms) of one range partition of a ms-partitioned table.
create or replace function ql.partition_upper_ms(p_partition regclass)
returns bigint
language sql
stable
strict
-- Read from its bound as PostgreSQL prints it: FOR VALUES FROM (…) TO ('<ms>').
return (select (pg_catalog.regexp_match(pg_catalog.pg_get_expr(c.relpartbound, c.oid), 'TO \(''?(\d+)''?\)'))[1]::bigint
          from pg_catalog.pg_class c where c.oid = p_partition);

comment on function ql.partition_upper_ms(regclass) is
'Returns the partition''s upper bound in ms (exclusive); NULL when it is not a range partition with a finite upper '
'bound. Never raises.';
