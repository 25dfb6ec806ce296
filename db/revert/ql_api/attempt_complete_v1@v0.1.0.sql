-- Revert qinglong:ql_api/attempt_complete_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.attempt_complete_v1(uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, bigint, integer, text, jsonb);
commit;
