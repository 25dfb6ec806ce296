-- Revert qinglong:ql/attempt_lock_key from pg
-- RESTORES the previous instance: the body of deploy/ql/attempt_lock_key@v0.1.0.sql with its grants,
-- written by scripts/sync_functions.py; never edit this one.
begin;
set local role ql_owner;
revoke all on function ql.attempt_lock_key(uuid) from public, ql_runtime, ql_scheduler, ql_readonly;

-- ql.attempt_lock_key: the advisory-lock key of one Attempt, the first lock of every Attempt-scoped call.
-- signature: ql.attempt_lock_key(uuid)
create or replace function ql.attempt_lock_key(p_attempt_id uuid)
returns bigint
language sql
immutable
strict
parallel safe
return pg_catalog.hashtextextended('ql.attempt:' || p_attempt_id::text, 0);

comment on function ql.attempt_lock_key(uuid) is
'Key for pg_advisory_xact_lock over one Attempt. A collision only serializes two Attempts; it never admits a wrong one.';

commit;
