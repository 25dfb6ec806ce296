-- Revert qinglong:ql_api/task_schedule_show_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.task_schedule_show_v1(uuid, text, integer);
commit;
