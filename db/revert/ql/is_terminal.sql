-- Revert qinglong:ql/is_terminal from pg
begin;
set local role ql_owner;
drop function ql.is_terminal(text);
commit;
