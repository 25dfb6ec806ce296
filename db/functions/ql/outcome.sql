-- ql.outcome: the typed non-success result every API function returns: {"status": …, "reason": …}.
create or replace function ql.outcome(p_status text, p_reason text)
returns jsonb
language sql
stable
parallel safe
-- Business outcomes (invalid input, not found, fenced, empty) are values, not exceptions (STYLE.md).
-- The status and the reason are cast to their enum types (ql.outcome_status and the status's
-- reason type, db/schema/ql/outcome_reasons.sql), so an unknown status or reason raises
-- 22P02 instead of leaving the database. Stable, not immutable: enum input is stable.
return pg_catalog.jsonb_build_object(
  'status', p_status::ql.outcome_status,
  'reason', case p_status
    when 'invalid' then p_reason::ql.invalid_reason::text
    when 'not_found' then p_reason::ql.not_found_reason::text
    when 'fenced' then p_reason::ql.fence_reason::text
    when 'empty' then p_reason::ql.empty_reason::text
  end);

comment on function ql.outcome(text, text) is
'Returns {"status": p_status, "reason": p_reason} for status invalid | not_found | fenced | empty and a reason '
'of its enum type (ql.invalid_reason, ql.not_found_reason, ql.fence_reason, ql.empty_reason). Raises 22P02 for '
'any other status or reason.';
