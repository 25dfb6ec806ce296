-- Revert qinglong:ql_api/retain from pg
begin;
set local role ql_owner;
drop procedure ql_api.retain(integer, integer);
commit;
