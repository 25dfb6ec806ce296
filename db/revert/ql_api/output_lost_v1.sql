-- Revert qinglong:ql_api/output_lost_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.output_lost_v1(uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, text, bigint);
commit;
