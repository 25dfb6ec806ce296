-- Revert qinglong:ql/policy_fence from pg
begin;
set local role ql_owner;
drop function ql.policy_fence(uuid, uuid, text, bigint, bigint);
commit;
