-- Revert qinglong:ql/run_create from pg
begin;
set local role ql_owner;
drop function ql.run_create(uuid, ql.task_execution_revisions, ql.actor_kind, uuid, jsonb, bigint);
commit;
