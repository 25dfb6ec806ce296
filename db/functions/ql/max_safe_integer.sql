-- ql.max_safe_integer: 2^53 - 1, the largest integer a JSON number holds exactly, the bound of every count, version and offset on the wire.
create or replace function ql.max_safe_integer()
returns bigint
language sql
immutable
parallel safe
return 9007199254740991;

comment on function ql.max_safe_integer() is
'Returns 9007199254740991 (2^53 - 1; the planner folds the call into that constant). Never raises.';
