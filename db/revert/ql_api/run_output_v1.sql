-- Revert qinglong:ql_api/run_output_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.run_output_v1(uuid, uuid, integer, bigint, integer);
commit;
