-- Revert qinglong:ql/attempt_fence from pg
begin;
set local role ql_owner;
drop function ql.attempt_fence(uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea);
commit;
