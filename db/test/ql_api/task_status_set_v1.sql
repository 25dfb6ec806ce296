-- Tests ql_api.task_status_set_v1 and what a disabled task means: the task (by id or name, within a Project by id or
-- name) is disabled or enabled; a user's enqueue of a disabled task is fenced (task_disabled, ql_api.run_enqueue_v1)
-- and a due schedule of it is skipped_inactive (ql_api.schedule_fire_v1), both queueing nothing; enabled again, both
-- queue Runs. Refusals (unknown, another Project's task, null) change nothing; only an operator may call it.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(25);

create function pg_temp.ostate() returns text language sql
return concat_ws(E'\n', pg_temp.pstate(),
  (select string_agg('task ' || t::text, E'\n' order by t.id) from ql.tasks t),
  (select string_agg('schedule ' || s::text, E'\n' order by s.task_id) from ql.task_schedules s),
  (select string_agg('fire ' || f::text, E'\n' order by f.task_id, f.fire_at_ms) from ql.schedule_fires f));

select is_definer('ql_api', 'task_status_set_v1', array['text', 'text', 'boolean'], 'task_status_set_v1 is SECURITY DEFINER');
select function_privs_are('ql_api', 'task_status_set_v1', array['text', 'text', 'boolean'], 'ql_runtime', array[]::text[],
  'the runtime role (the shell) may not disable a task');
select function_privs_are('ql_api', 'task_status_set_v1', array['text', 'text', 'boolean'], 'ql_scheduler', array[]::text[],
  'the scheduler role may not disable a task');
set local role ql_runtime;
select throws_ok($$select ql_api.task_status_set_v1('ts-p', 'job', false)$$, '42501',
  'permission denied for function task_status_set_v1', 'the runtime role calling it is refused: 42501');
reset role;

-- Project ts-p with task job (scheduled every minute, due now) and alice its operator; ts-q has a task job too.
select pg_temp.mk_project('ts-p') as p, pg_temp.mk_project('ts-q') as q \gset
select ql_api.task_create_v1(:'p', 'job', '{"argv": ["true"]}') ->> 'taskId' as job \gset
select ql_api.task_create_v1(:'q', 'job', '{"argv": ["true"]}') ->> 'taskId' as qjob \gset
select ql_api.task_create_v1(:'q', 'only-q', '{"argv": ["true"]}') ->> 'taskId' as only_q \gset
select ql_api.task_schedule_set_v1(:'p', 'job', '* * * * *', 'UTC', 'allow') ->> 'status' as sched \gset
-- Make the schedule due: its next fire time p_minutes whole minutes ago.
create function pg_temp.make_due(p_minutes int) returns void language sql
begin atomic
  update ql.task_schedules set next_fire_at_ms = (ql.now_ms() / 60000 - p_minutes) * 60000;
end;
select pg_temp.mk_subject('ts-alice') as alice \gset
insert into ql.role_bindings (project_id, subject_id, role) values (:'p', :'alice', 'operator');
create function pg_temp.enqueue(p_mutation text) returns jsonb language plpgsql as $$
declare v_adm jsonb;
begin
  v_adm := ql_api.request_admission_v1(sha256(convert_to('tok-ts-alice', 'UTF8')), (select id from ql.projects where name = 'ts-p'),
                                       'run.start', 'POST /api/v3/projects/{projectId}/runs', 'ts.' || p_mutation);
  return ql_api.run_enqueue_v1((v_adm ->> 'subjectId')::uuid, (select id from ql.projects where name = 'ts-p'),
    (select id from ql.tasks t where t.name = 'job' and t.project_id = (select id from ql.projects where name = 'ts-p')),
    p_mutation, (v_adm ->> 'projectVersion')::bigint, (v_adm ->> 'bindingVersion')::bigint);
end $$;

-- Refusals change nothing.
select pg_temp.ostate() as before \gset
select is(ql_api.task_status_set_v1(null, 'job', false), '{"status": "invalid", "reason": "project_id"}', 'a NULL Project is invalid');
select is(ql_api.task_status_set_v1('ts-p', '', false), '{"status": "invalid", "reason": "name"}', 'an empty task is invalid');
select is(ql_api.task_status_set_v1('ts-p', 'job', null), '{"status": "invalid", "reason": "active"}', 'a NULL status is invalid');
select is(ql_api.task_status_set_v1('ts-nowhere', 'job', false), '{"status": "not_found", "reason": "project"}',
  'an unknown Project is not found');
select is(ql_api.task_status_set_v1('ts-p', 'only-q', false), '{"status": "not_found", "reason": "task"}',
  'another Project''s task, by name, is not found');
select is(ql_api.task_status_set_v1('ts-p', :'only_q', false), '{"status": "not_found", "reason": "task"}',
  'another Project''s task, by id, is not found');
select is(pg_temp.ostate(), :'before', 'the refused calls change nothing');

-- Disable by names: only ts-p's job.
select is(ql_api.task_status_set_v1('ts-p', 'job', false), jsonb_build_object('status', 'disabled', 'projectId', :'p'::uuid,
  'taskId', :'job'::uuid, 'name', 'job', 'changed', true), 'disabling by names answers disabled');
select results_eq(format('select status from ql.tasks where id in (%L, %L) order by project_id = %L desc', :'job', :'qjob', :'p'),
  $$values ('disabled'::text), ('active'::text)$$, 'the task is disabled; the same name in another Project is not');

-- A user's enqueue is fenced, and changes nothing.
select pg_temp.ostate() as before \gset
select is(pg_temp.enqueue('ts-1'), '{"status": "fenced", "reason": "task_disabled"}', 'enqueueing a disabled task is fenced');
select is(pg_temp.ostate(), :'before', 'the fenced enqueue queues no Run and stores no mutation');
-- The scheduler skips it: skipped_inactive, no Run.
select pg_temp.make_due(1);
select (select count(*) from ql.runs) as runs_before \gset
select is(ql_api.schedule_fire_v1(8) ->> 'skipped', '1', 'the due schedule of a disabled task is skipped');
select is((select outcome from ql.schedule_fires where task_id = :'job'), 'skipped_inactive',
  'the fire time is recorded skipped_inactive');
select is((select count(*) from ql.runs), :'runs_before'::bigint, 'the scheduler queued no Run');

-- Disabling again changes nothing.
select pg_temp.ostate() as before \gset
select is(ql_api.task_status_set_v1(:'p', :'job', false) ->> 'changed', 'false', 'disabling again (by ids) answers changed false');
select is(pg_temp.ostate(), :'before', 'and changes nothing');

-- Enabled again (ids, upper case): both queue Runs.
select is(ql_api.task_status_set_v1(upper(:'p'), upper(:'job'), true) - 'projectId' - 'taskId',
  '{"status": "enabled", "name": "job", "changed": true}', 'enabling by ids answers enabled');
select is(pg_temp.enqueue('ts-2') ->> 'status', 'enqueued', 'an enabled task is enqueued');
select pg_temp.make_due(2);  -- another fire time than the skipped one
select is(ql_api.schedule_fire_v1(8) ->> 'enqueued', '1', 'its due schedule queues a Run again');
select is((select count(*) from ql.runs where task_id = :'job')::int, 2, 'two Runs of the task: the user''s and the scheduler''s');
select is((select status from ql.tasks where id = :'qjob'), 'active', 'the other Project''s task was never touched');

select * from finish();
rollback;
