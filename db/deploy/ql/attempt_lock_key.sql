-- Deploy qinglong:ql/attempt_lock_key to pg
-- FROZEN COPY of db/functions/ql/attempt_lock_key.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql.attempt_lock_key: the advisory-lock key of one Attempt, the first lock of every Attempt-scoped call.
create or replace function ql.attempt_lock_key(p_attempt_id uuid)
returns bigint
language sql
immutable
strict
parallel safe
return pg_catalog.hashtextextended('ql.attempt:' || p_attempt_id::text, 0);

comment on function ql.attempt_lock_key(uuid) is
'Returns the pg_advisory_xact_lock key of one Attempt (a collision only serializes two Attempts; it never '
'admits a wrong one). Never raises.';

commit;
