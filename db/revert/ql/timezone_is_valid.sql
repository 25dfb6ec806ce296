-- Revert qinglong:ql/timezone_is_valid from pg
begin;
set local role ql_owner;
drop function ql.timezone_is_valid(text);
commit;
