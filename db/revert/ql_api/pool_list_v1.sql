-- Revert qinglong:ql_api/pool_list_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.pool_list_v1();
commit;
