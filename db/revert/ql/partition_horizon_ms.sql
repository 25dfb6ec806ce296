-- Revert qinglong:ql/partition_horizon_ms from pg
begin;
set local role ql_owner;
drop function ql.partition_horizon_ms();
commit;
