-- ql.is_terminal: a status no function leaves: a Run's succeeded, failed, cancelled, timed_out (an Attempt ends in the same four by completion).
create or replace function ql.is_terminal(p_status text)
returns boolean
language sql
immutable
parallel safe
return p_status in ('succeeded', 'failed', 'cancelled', 'timed_out');

comment on function ql.is_terminal(text) is
'Returns true for succeeded | failed | cancelled | timed_out, false for any other status, NULL for NULL. Never raises.';
