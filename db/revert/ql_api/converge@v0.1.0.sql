-- Revert qinglong:ql_api/converge from pg
begin;
set local role ql_owner;
drop procedure ql_api.converge(integer, integer, bigint);
commit;
