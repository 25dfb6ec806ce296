-- Revert qinglong:ql/run_cancel_intent from pg
begin;
set local role ql_owner;
drop function ql.run_cancel_intent(uuid, ql.cancel_reason, ql.actor_kind, uuid, bigint);
commit;
