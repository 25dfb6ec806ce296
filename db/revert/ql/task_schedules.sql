-- Revert qinglong:ql/task_schedules from pg
begin;
drop index ql.runs_task_live_idx;
drop table ql.schedule_fires;
drop table ql.task_schedules;
commit;
