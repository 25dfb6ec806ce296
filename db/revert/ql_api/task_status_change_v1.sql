-- Revert qinglong:ql_api/task_status_change_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.task_status_change_v1(uuid, uuid, text, boolean, bigint, bigint);
commit;
