-- Revert qinglong:ql/task_write_fence from pg
begin;
set local role ql_owner;
drop function ql.task_write_fence(uuid, uuid, bigint, bigint);
commit;
