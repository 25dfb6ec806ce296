-- Revert qinglong:ql_api/attempt_activation_v2 from pg
begin;
set local role ql_owner;
drop function ql_api.attempt_activation_v2(text, uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, text, text);
commit;
