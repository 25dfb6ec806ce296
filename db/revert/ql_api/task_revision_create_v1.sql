-- Revert qinglong:ql_api/task_revision_create_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.task_revision_create_v1(uuid, uuid, text, jsonb, jsonb, text, bigint, bigint);
commit;
