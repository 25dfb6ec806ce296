-- Revert qinglong:ql_api/attempt_lease_control_v2 from pg
begin;
set local role ql_owner;
drop function ql_api.attempt_lease_control_v2(uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, bigint, boolean);
commit;
