-- Revert qinglong:ql/outcome from pg
-- RESTORES the previous instance: the body of deploy/ql/outcome@v0.1.0.sql with its grants,
-- written by scripts/sync_functions.py; never edit this one.
begin;
set local role ql_owner;
revoke all on function ql.outcome(text, text) from public, ql_runtime, ql_scheduler, ql_readonly;

-- ql.outcome: the typed non-success result every API function returns: {"status": …, "reason": …}.
-- Business outcomes (invalid input, not found, fenced) are values, not exceptions (STYLE.md).
-- signature: ql.outcome(text, text)
create or replace function ql.outcome(p_status text, p_reason text)
returns jsonb
language sql
immutable
parallel safe
return pg_catalog.jsonb_build_object('status', p_status, 'reason', p_reason);

comment on function ql.outcome(text, text) is
'Builds {"status": p_status, "reason": p_reason}; status is invalid | not_found | fenced | empty. Never raises.';

commit;
