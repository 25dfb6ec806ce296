-- Revert qinglong:ql_api/storage_health_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.storage_health_v1();
commit;
