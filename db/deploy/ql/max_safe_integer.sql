-- Deploy qinglong:ql/max_safe_integer to pg
-- FROZEN COPY of db/functions/ql/max_safe_integer.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql.max_safe_integer: 2^53 - 1, the largest integer a JSON number holds exactly, the bound of every count, version and offset on the wire.
create or replace function ql.max_safe_integer()
returns bigint
language sql
immutable
parallel safe
return 9007199254740991;

comment on function ql.max_safe_integer() is
'Returns 9007199254740991 (2^53 - 1; the planner folds the call into that constant). Never raises.';

commit;
