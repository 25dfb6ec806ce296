-- Revert qinglong:ql/role_allows from pg
begin;
set local role ql_owner;
drop function ql.role_allows(text, text);
commit;
