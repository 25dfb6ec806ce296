-- ql.now_ms: the database clock in milliseconds since the epoch, the only clock of the control plane.
create or replace function ql.now_ms()
returns bigint
language sql
volatile
parallel safe
-- clock_timestamp(), not now(): callers read it AFTER their locks are held, so a transaction that
-- waited for a lock does not stamp a time from before it could act (docs/architecture.md §3).
return (extract(epoch from pg_catalog.clock_timestamp()) * 1000)::bigint;

comment on function ql.now_ms() is
'Returns clock_timestamp() in ms since the epoch (call it after taking locks). Never raises.';
