-- Revert qinglong:ql_api/converge_grace_floor_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.converge_grace_floor_v1();
commit;
