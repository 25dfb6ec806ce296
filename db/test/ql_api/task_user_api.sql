-- Tests the user API's task functions (docs/decisions/0024-console-actions.md): ql_api.task_revision_create_v1,
-- task_status_change_v1, task_schedule_change_v1 (each re-verifies task.write, owner and admin only, then acts as the
-- operator's function does) and schedule_preview_v1 (the next fire times of an expression, read-only). Refusals
-- (a role without task.write, a stale admission, bad input) change nothing; a replayed revision is its first answer.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(39);

create function pg_temp.who(p_name text, p_project uuid, out subject uuid, out pv bigint, out bv bigint)
language sql security definer
return (select (s.id, coalesce(p.version, 0), coalesce(b.version, 0)) from ql.subjects s
          left join ql.projects p on p.id = p_project
          left join ql.role_bindings b on b.subject_id = s.id and b.project_id = p_project
         where s.name = p_name);
create function pg_temp.revise(p_subject text, p_project uuid, p_name text, p_plan jsonb, p_mutation text,
                               p_signature jsonb default null) returns jsonb language sql
return (select ql_api.task_revision_create_v1(w.subject, p_project, p_name, p_plan, p_signature, p_mutation, w.pv, w.bv)
          from pg_temp.who(p_subject, p_project) w);
create function pg_temp.status(p_subject text, p_project uuid, p_name text, p_active boolean) returns jsonb
language sql
return (select ql_api.task_status_change_v1(w.subject, p_project, p_name, p_active, w.pv, w.bv)
          from pg_temp.who(p_subject, p_project) w);
create function pg_temp.sched(p_subject text, p_project uuid, p_name text, p_cron text, p_tz text default 'UTC',
                              p_overlap text default 'skip') returns jsonb language sql
return (select ql_api.task_schedule_change_v1(w.subject, p_project, p_name, p_cron, p_tz, p_overlap, w.pv, w.bv)
          from pg_temp.who(p_subject, p_project) w);
create function pg_temp.tstate() returns text language sql security definer
return concat_ws(E'\n', pg_temp.pstate(),
  (select string_agg('task ' || t::text, E'\n' order by t.id) from ql.tasks t),
  (select string_agg('revision ' || r.id || r.plan_json::text || coalesce(r.plan_signature::text, '-'), E'\n'
                     order by r.id) from ql.task_execution_revisions r),
  (select string_agg('schedule ' || s::text, E'\n' order by s.task_id) from ql.task_schedules s));

-- ---------------------------------------------------------------------------------------------
-- Structure: SECURITY DEFINER, executable by the runtime role (the shell).
select is_definer('ql_api', 'task_revision_create_v1',
  array['uuid', 'uuid', 'text', 'jsonb', 'jsonb', 'text', 'bigint', 'bigint'], 'task_revision_create_v1 is SECURITY DEFINER');
select is_definer('ql_api', 'task_status_change_v1', array['uuid', 'uuid', 'text', 'boolean', 'bigint', 'bigint'],
  'task_status_change_v1 is SECURITY DEFINER');
select is_definer('ql_api', 'task_schedule_change_v1',
  array['uuid', 'uuid', 'text', 'text', 'text', 'text', 'bigint', 'bigint'], 'task_schedule_change_v1 is SECURITY DEFINER');
select is_definer('ql_api', 'schedule_preview_v1', array['text', 'text', 'integer'],
  'schedule_preview_v1 is SECURITY DEFINER');
select is(array(select r from unnest(array['owner', 'admin', 'operator', 'viewer']) r
                 where ql.role_allows(r, 'task.write') order by 1),
  array['admin', 'owner'], 'task.write: owner and admin only');

select pg_temp.mk_project('tu-p') as p, pg_temp.mk_project('tu-q') as q \gset
select pg_temp.mk_subject('tu-own') as own, pg_temp.mk_subject('tu-op') as op, pg_temp.mk_subject('tu-out') as out \gset
insert into ql.role_bindings (project_id, subject_id, role) values
  (:'p', :'own', 'admin'), (:'p', :'op', 'operator'), (:'q', :'out', 'owner');
select is(ql_api.request_admission_v1(pg_temp.digest('tok-tu-op'), :'p', 'task.write', 'PUT tasks', 'r-1') ->> 'reason',
  'role.insufficient', 'admission denies an operator task.write');
select is(ql_api.request_admission_v1(pg_temp.digest('tok-tu-own'), :'p', 'task.write', 'PUT tasks', 'r-2') ->> 'decision',
  'allow', 'admission allows an admin task.write');

-- ---------------------------------------------------------------------------------------------
-- A new task, then a revision; a replay answers its first answer; another command under that id is fenced.
set local role ql_runtime;
select pg_temp.revise('tu-own', :'p', 'job', '{"argv": ["echo", "one"], "pool": "default"}', 'm-1') as first \gset
select is(:'first'::jsonb ->> 'status', 'created', 'an admin creates a task');
select is((:'first'::jsonb - 'taskId' - 'revisionId'), '{"status": "created", "name": "job", "signed": false}',
  '… unsigned, named in the answer');
select is(pg_temp.revise('tu-own', :'p', 'job', '{"argv": ["echo", "one"], "pool": "default"}', 'm-1'),
  :'first'::jsonb || '{"status": "already_made"}', 'a replay answers the first answer, already_made');
select is(pg_temp.revise('tu-own', :'p', 'job', '{"argv": ["echo", "two"]}', 'm-1'),
  '{"status": "fenced", "reason": "mutation_conflict"}', 'another plan under a used mutation id is fenced');
select pg_temp.revise('tu-own', :'p', 'job', '{"argv": ["echo", "two"], "env": {"A": "1"}, "timeoutMs": 5000}', 'm-2')
  as second \gset
select is(:'second'::jsonb ->> 'status', 'revised', 'a new plan is a new revision');
select is(:'second'::jsonb ->> 'taskId', :'first'::jsonb ->> 'taskId', '… of the same task');
reset role;
select is((select t.current_revision_id::text from ql.tasks t where t.id = (:'second'::jsonb ->> 'taskId')::uuid),
  :'second'::jsonb ->> 'revisionId', '… which becomes current');
set local role ql_runtime;
select is(pg_temp.revise('tu-own', :'p', 'job', '{"argv": ["x"]}', 'm-3',
                         jsonb_build_object('keyId', repeat('a', 16), 'signature', translate(encode(decode(repeat('00', 64), 'hex'), 'base64'), E'\n', '')))
          ->> 'signed', 'true', 'a signature the client made is stored with the revision');

select pg_temp.tstate() as before \gset
select is(pg_temp.revise('tu-op', :'p', 'job', '{"argv": ["rm"]}', 'm-4'),
  '{"status": "fenced", "reason": "role_insufficient"}', 'an operator cannot revise a task');
select is(pg_temp.revise('tu-own', :'p', 'job', '{"argv": []}', 'm-5'), '{"status": "invalid", "reason": "plan"}',
  'a bad plan is invalid');
select is(pg_temp.revise('tu-own', :'p', 'bad name', '{"argv": ["x"]}', 'm-6'), '{"status": "invalid", "reason": "name"}',
  'a bad name is invalid');
select is(pg_temp.revise('tu-own', :'p', 'job', '{"argv": ["x"], "secretEnv": {"T": "NOPE"}}', 'm-7'),
  '{"status": "not_found", "reason": "secret", "detail": "NOPE"}', 'a missing secret is not_found');
select is(pg_temp.revise('tu-own', :'p', 'job', '{"argv": ["x"]}', 'bad id!'),
  '{"status": "invalid", "reason": "mutation_id"}', 'a bad mutation id is invalid');
select is((select ql_api.task_revision_create_v1(w.subject, :'p', 'job', '{"argv": ["x"]}', null, 'm-8', w.pv - 1, w.bv)
             from pg_temp.who('tu-own', :'p') w),
  '{"status": "fenced", "reason": "project_changed"}', 'a stale admission is fenced');
select is(pg_temp.revise('tu-out', :'p', 'job', '{"argv": ["x"]}', 'm-9'), '{"status": "not_found", "reason": "project"}',
  'another Project''s owner finds no Project');
select is(pg_temp.tstate(), :'before', 'the refusals changed nothing');

-- ---------------------------------------------------------------------------------------------
-- Enable and disable.
select is(pg_temp.status('tu-own', :'p', 'job', false) - 'projectId' - 'taskId',
  '{"status": "disabled", "name": "job", "changed": true}', 'an admin disables a task');
select is(pg_temp.status('tu-own', :'p', 'job', false) ->> 'changed', 'false', 'again: nothing changes');
select pg_temp.tstate() as before \gset
select is(pg_temp.status('tu-op', :'p', 'job', true), '{"status": "fenced", "reason": "role_insufficient"}',
  'an operator cannot enable it');
select is(pg_temp.status('tu-own', :'p', 'nope', true), '{"status": "not_found", "reason": "task"}',
  'an unknown task is not_found');
select is(pg_temp.tstate(), :'before', '… and nothing changed');
select is(pg_temp.status('tu-own', :'p', 'job', true) ->> 'status', 'enabled', 'an admin enables it');

-- ---------------------------------------------------------------------------------------------
-- Schedules.
select is(pg_temp.sched('tu-own', :'p', 'job', '*/10 * * * * *', 'Asia/Shanghai') ->> 'status', 'set',
  'an admin sets a 6-field schedule');
select pg_temp.tstate() as before \gset
select is(pg_temp.sched('tu-own', :'p', 'job', '61 * * * *') ->> 'reason', 'cron', 'a bad expression is invalid');
select is(pg_temp.sched('tu-own', :'p', 'job', '* * * * *', 'Mars/Base'), '{"status": "invalid", "reason": "timezone"}',
  'an unknown zone is invalid');
select is(pg_temp.sched('tu-op', :'p', 'job', '* * * * *'), '{"status": "fenced", "reason": "role_insufficient"}',
  'an operator cannot set it');
select is(pg_temp.tstate(), :'before', '… and nothing changed');
select is(pg_temp.sched('tu-own', :'p', 'job', null) ->> 'status', 'cleared', 'a NULL expression clears it');

-- ---------------------------------------------------------------------------------------------
-- The preview: what the schedule would do, from now.
select is(jsonb_array_length(ql_api.schedule_preview_v1('*/15 * * * * *', 'UTC', 4) -> 'fires'), 4,
  'the preview answers the asked number of fire times');
select ok((select bool_and(((f ->> 'atMs')::bigint / 1000) % 15 = 0 and (f ->> 'atMs')::bigint > extract(epoch from now()) * 1000
                           and f ->> 'local' like '%+00:00')
             from jsonb_array_elements(ql_api.schedule_preview_v1('*/15 * * * * *', 'UTC', 4) -> 'fires') f),
  'each is a future multiple of 15 s, with its local time and offset');
select is(ql_api.schedule_preview_v1('0 9 * * *', 'Asia/Shanghai', 1) -> 'fires' -> 0 ->> 'local' like '%T09:00:00+08:00',
  true, 'a 5-field expression at 09:00 in Shanghai is 09:00+08:00');
select is(ql_api.schedule_preview_v1('* * 30 2 *', 'UTC', 1) ->> 'reason', 'cron_never_fires',
  'an expression that never fires is refused as a set refuses it');
reset role;

select * from finish();
rollback;
