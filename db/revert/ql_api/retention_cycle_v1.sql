-- Revert qinglong:ql_api/retention_cycle_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.retention_cycle_v1(bigint, integer, bigint, boolean);
commit;
