-- Deploy qinglong:ql/now_ms to pg
-- FROZEN COPY of db/functions/ql/now_ms.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql.now_ms: the database clock in milliseconds since the epoch, the only clock of the control plane.
-- clock_timestamp(), not now(): callers read it AFTER their locks are held, so a transaction that
-- waited for a lock does not stamp a time from before it could act (docs/architecture.md §3).
-- signature: ql.now_ms()
create or replace function ql.now_ms()
returns bigint
language sql
volatile
parallel safe
return (extract(epoch from pg_catalog.clock_timestamp()) * 1000)::bigint;

comment on function ql.now_ms() is
'Database time in ms since the epoch (clock_timestamp). Call after taking locks. Never raises.';

commit;
