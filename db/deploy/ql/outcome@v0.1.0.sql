-- Deploy qinglong:ql/outcome to pg
-- FROZEN COPY of db/functions/ql/outcome.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

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
