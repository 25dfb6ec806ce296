-- Revert qinglong:ql/schedule_fire from pg
begin;
set local role ql_owner;
drop function ql.schedule_fire(ql.task_schedules);
commit;
