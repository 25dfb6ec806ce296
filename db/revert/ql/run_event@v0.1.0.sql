-- Revert qinglong:ql/run_event from pg
begin;
set local role ql_owner;
drop function ql.run_event(uuid, ql.run_status, text, ql.actor_kind, uuid, uuid, jsonb, bigint, text, uuid);
commit;
