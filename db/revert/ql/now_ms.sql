-- Revert qinglong:ql/now_ms from pg
-- RESTORES the previous instance: the body of deploy/ql/now_ms@v0.1.0.sql with its grants,
-- written by scripts/sync_functions.py; never edit this one.
begin;
set local role ql_owner;
revoke all on function ql.now_ms() from public, ql_runtime, ql_scheduler, ql_readonly;

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
