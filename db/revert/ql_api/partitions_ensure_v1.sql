-- Revert qinglong:ql_api/partitions_ensure_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.partitions_ensure_v1(integer);
commit;
