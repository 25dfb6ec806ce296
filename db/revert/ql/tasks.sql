-- Revert qinglong:ql/tasks from pg
begin;
alter table ql.tasks drop column current_revision_id;
drop table ql.task_execution_revisions;
drop table ql.tasks;
drop table ql.executor_revisions;
commit;
