-- Verify qinglong:ql/tasks on pg
select id, kind, version from ql.executor_revisions where false;
select id, project_id, name, current_revision_id from ql.tasks where false;
select id, task_id, project_id, plan_json, executor_revision_id from ql.task_execution_revisions where false;
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_trigger
where tgrelid = 'ql.task_execution_revisions'::regclass and not tgisinternal having pg_catalog.count(*) = 2;
