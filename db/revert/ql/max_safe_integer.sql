-- Revert qinglong:ql/max_safe_integer from pg
begin;
set local role ql_owner;
drop function ql.max_safe_integer();
commit;
