-- Tests ql_api.task_list_v1: one Project's tasks (the Project named by id or name) with their current plan summary
-- and schedule; another Project's tasks never appear; refusals and reads change nothing; operators and the runtime role (the shell, after admission) may call it.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(16);

create function pg_temp.ostate() returns text language sql
return concat_ws(E'\n', pg_temp.pstate(),
  (select string_agg('task ' || t::text, E'\n' order by t.id) from ql.tasks t),
  (select string_agg('schedule ' || s::text, E'\n' order by s.task_id) from ql.task_schedules s));

select is_definer('ql_api', 'task_list_v1', array['text'], 'task_list_v1 is SECURITY DEFINER');
select function_privs_are('ql_api', 'task_list_v1', array['text'], 'ql_runtime', array['EXECUTE'],
  'the runtime role (the shell, after admitting run.read) may list a Project''s tasks');
select function_privs_are('ql_api', 'task_list_v1', array['text'], 'ql_scheduler', array[]::text[],
  'the scheduler role may not list tasks');
set local role ql_runtime;
select is(ql_api.task_list_v1('tl-none'), '{"status": "not_found", "reason": "project"}'::jsonb,
  'the runtime role calls it (and, as anyone, learns nothing of a Project that does not exist)');
reset role;

select pg_temp.mk_project('tl-mine') as mine \gset
select pg_temp.mk_project('tl-other') as other \gset
select ql_api.task_create_v1(:'mine', 'build', '{"argv": ["make"], "pool": "gpu", "timeoutMs": 5000, "maxAttempts": 2}')
  ->> 'taskId' as build \gset
select ql_api.task_create_v1(:'mine', 'backup', '{"argv": ["tar", "c"]}') ->> 'taskId' as backup \gset
select ql_api.task_schedule_set_v1(:'mine', 'backup', '0 3 * * *', 'UTC', 'skip') is not null as scheduled \gset
select ql_api.task_create_v1(:'other', 'secret', '{"argv": ["cat"]}') ->> 'taskId' as secret \gset

select pg_temp.ostate() as before \gset
select is(ql_api.task_list_v1(null), '{"status": "invalid", "reason": "project_id"}', 'a NULL Project is invalid');
select is(ql_api.task_list_v1(''), '{"status": "invalid", "reason": "project_id"}', 'an empty Project is invalid');
select is(ql_api.task_list_v1('tl-nobody'), '{"status": "not_found", "reason": "project"}', 'an unknown name is not found');
select is(ql_api.task_list_v1(gen_random_uuid()::text), '{"status": "not_found", "reason": "project"}',
  'an unknown id is not found');

select ql_api.task_list_v1('tl-mine') as listed \gset
select is(:'listed'::jsonb - 'tasks', jsonb_build_object('status', 'listed', 'projectId', :'mine'::uuid, 'project', 'tl-mine'),
  'the listing names its Project');
select is(jsonb_path_query_array(:'listed'::jsonb, '$.tasks[*].name'), '["backup", "build"]',
  'only this Project''s tasks, by name: another Project''s never appear');
select is((:'listed'::jsonb -> 'tasks' -> 1) - 'revisionId', jsonb_build_object('taskId', :'build'::uuid, 'name', 'build', 'status', 'active',
  'argv', '["make"]'::jsonb, 'pool', 'gpu', 'timeoutMs', 5000, 'maxAttempts', 2, 'schedule', null,
  'plan', '{"argv": ["make"], "pool": "gpu", "timeoutMs": 5000, "maxAttempts": 2}'::jsonb, 'signed', false),
  'a task answers its current plan''s summary, the plan in full, unsigned, and no schedule');
select is((:'listed'::jsonb -> 'tasks' -> 0 -> 'schedule') - 'nextFiresMs',
  '{"cron": "0 3 * * *", "timezone": "UTC", "overlap": "skip"}', 'a scheduled task answers its schedule');
select is(:'listed'::jsonb -> 'tasks' -> 0 -> 'schedule' -> 'nextFiresMs',
  (select to_jsonb(array[s.next_fire_at_ms, s.next_fire_at_ms + 86400000, s.next_fire_at_ms + 2 * 86400000])
     from ql.task_schedules s join ql.tasks t on t.id = s.task_id where t.project_id = :'mine' and t.name = 'backup'),
  '… and its next three fire times: the stored cursor, then a day apart for 0 3 * * * in UTC');
select is(ql.schedule_fires_ahead('0 3 * * *', 'UTC', null, 3), '{}'::bigint[], 'no first fire time: none ahead');
select is(ql_api.task_list_v1(upper(:'mine')), :'listed'::jsonb, 'the Project named by its id answers the same');
select is(pg_temp.ostate(), :'before', 'refusals and listings change nothing');

select * from finish();
rollback;
