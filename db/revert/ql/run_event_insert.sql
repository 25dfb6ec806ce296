-- Revert qinglong:ql/run_event_insert from pg
begin;
set local role ql_owner;
drop function ql.run_event_insert(uuid, bigint, bigint, text, ql.actor_kind, uuid, uuid, jsonb, bigint, text, uuid);
commit;
