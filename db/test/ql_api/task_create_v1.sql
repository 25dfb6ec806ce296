-- Tests ql_api.task_create_v1: a task is created with its first revision, then revised (the new revision becomes
-- current, a Run queued earlier keeps the revision it pinned, revisions are immutable), every kind of bad plan of
-- ql.plan_is_valid is invalid, a missing or archived Project is not_found, and none of them changes anything; no
-- runtime or scheduler role may create a task (operators call it as a DBA, through the CLI).
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(105);

-- Everything the control plane stores: runs, attempts, …, projects, subjects, bindings, tasks, revisions, workers.
create function pg_temp.ostate() returns text language sql
return concat_ws(E'\n', pg_temp.state(),
  (select string_agg('project ' || p::text, E'\n' order by p.id) from ql.projects p),
  (select string_agg('subject ' || s::text, E'\n' order by s.id) from ql.subjects s),
  (select string_agg('binding ' || b::text, E'\n' order by b.project_id, b.subject_id) from ql.role_bindings b),
  (select string_agg('task ' || t::text, E'\n' order by t.id) from ql.tasks t),
  (select string_agg('revision ' || r::text, E'\n' order by r.id) from ql.task_execution_revisions r),
  (select string_agg('worker ' || w::text, E'\n' order by w.id) from ql.workers w),
  (select string_agg('bundle ' || b::text, E'\n' order by b.digest) from ql.bundles b));

-- A refused call: its answer, and whether the stored state is exactly what it was before the call.
create function pg_temp.refused(p_project uuid, p_name text, p_plan jsonb, p_signature jsonb default null)
returns text language plpgsql as $$
declare
  v_before text := pg_temp.ostate();
  v_result jsonb := ql_api.task_create_v1(p_project, p_name, p_plan, p_signature);
begin
  return v_result::text || case when pg_temp.ostate() is not distinct from v_before
                                then ' and nothing changed' else ' but the state changed' end;
end $$;

-- The current revision id of a task.
create function pg_temp.current_of(p_task uuid) returns uuid language sql
return (select t.current_revision_id from ql.tasks t where t.id = p_task);

-- ---------------------------------------------------------------------------------------------
-- Structure: an operator's command, SECURITY DEFINER, executable by its owner only.
select has_function('ql_api', 'task_create_v1', array['uuid', 'text', 'jsonb', 'jsonb'],
  'task_create_v1(project, name, plan, plan signature) exists');
select is_definer('ql_api', 'task_create_v1', array['uuid', 'text', 'jsonb', 'jsonb'],
  'task_create_v1 runs as its owner (SECURITY DEFINER)');
select function_returns('ql_api', 'task_create_v1', array['uuid', 'text', 'jsonb', 'jsonb'], 'jsonb',
  'task_create_v1 answers a typed jsonb result');
select is((select p.proconfig from pg_catalog.pg_proc p
            where p.oid = 'ql_api.task_create_v1(uuid, text, jsonb, jsonb)'::regprocedure),
  array['search_path=pg_catalog, pg_temp'], 'task_create_v1 pins search_path to pg_catalog, pg_temp');
select function_privs_are('ql_api', 'task_create_v1', array['uuid', 'text', 'jsonb', 'jsonb'], 'ql_owner', array['EXECUTE'],
  'only its owner ql_owner (an operator acting as DBA) may create or revise a task');
select function_privs_are('ql_api', 'task_create_v1', array['uuid', 'text', 'jsonb', 'jsonb'], 'ql_runtime', array[]::text[],
  'the runtime role (the shell) may not create or revise a task');
select function_privs_are('ql_api', 'task_create_v1', array['uuid', 'text', 'jsonb', 'jsonb'], 'ql_scheduler', array[]::text[],
  'the scheduler role may not create or revise a task');
select function_privs_are('ql_api', 'task_create_v1', array['uuid', 'text', 'jsonb', 'jsonb'], 'public', array[]::text[],
  'PUBLIC may not create or revise a task');

-- ---------------------------------------------------------------------------------------------
-- Setup: Project P (its pool tc-pool has a Worker), Project Q, archived Project A; a subject alice who may
-- start Runs in P.
select pg_temp.mk_project('tc-p') as p, pg_temp.mk_project('tc-q') as q, pg_temp.mk_project('tc-a') as a \gset
select pg_temp.mk_run(pg_temp.mk_revision(:'q')) as q_run \gset
update ql.projects set status = 'archived' where id = :'a';
select pg_temp.mk_worker('tc-pool') as w \gset
insert into ql.subjects (kind, name, token_digest) values ('user', 'alice', pg_temp.digest('tok-alice'))
returning id as alice \gset
insert into ql.role_bindings (project_id, subject_id, role) values (:'p', :'alice', 'operator');

select pg_temp.ostate() as before \gset
set local role ql_runtime;
select throws_ok(format($$select ql_api.task_create_v1(%L, 'from-shell', '{"argv": ["true"]}')$$, :'p'), '42501',
  'permission denied for function task_create_v1', 'the runtime role calling task_create_v1 is refused: 42501');
reset role;
set local role ql_scheduler;
select throws_ok(format($$select ql_api.task_create_v1(%L, 'from-cron', '{"argv": ["true"]}')$$, :'p'), '42501',
  'permission denied for function task_create_v1', 'the scheduler role calling task_create_v1 is refused: 42501');
reset role;
select is(pg_temp.ostate(), :'before', 'the refused calls create no task and change nothing');

-- ---------------------------------------------------------------------------------------------
-- 1. created: the task and its first revision, which is current.
select ql_api.task_create_v1(:'p', 'build', '{"argv": ["make", "all"], "pool": "tc-pool", "env": {"CI": "1"}}')
  as created \gset
select :'created'::jsonb ->> 'taskId' as task, :'created'::jsonb ->> 'revisionId' as rev1 \gset

select is(array(select k from jsonb_object_keys(:'created'::jsonb) k order by k),
  array['revisionId', 'status', 'taskId'], 'created answers exactly status, taskId and revisionId');
select is(:'created'::jsonb, jsonb_build_object('status', 'created', 'taskId', :'task'::uuid, 'revisionId', :'rev1'::uuid),
  'a new task name is created with its first revision');
select results_eq(
  format('select t.project_id, t.name, t.current_revision_id from ql.tasks t where t.id = %L', :'task'),
  format('values (%L::uuid, %L::text, %L::uuid)', :'p', 'build', :'rev1'),
  'the task is stored in its Project under its name, the first revision current');
select results_eq(
  format('select r.task_id, r.project_id, r.plan_json, r.executor_revision_id from ql.task_execution_revisions r
           where r.id = %L', :'rev1'),
  format($$values (%L::uuid, %L::uuid, '{"argv": ["make", "all"], "pool": "tc-pool", "env": {"CI": "1"}}'::jsonb,
                   '00000000-0000-4000-8000-000000000001'::uuid)$$, :'task', :'p'),
  'the revision holds exactly the plan given, on the process executor version 1');

-- A Run queued now pins revision 1.
select pg_temp.mk_run(:'rev1') as old_run \gset

-- ---------------------------------------------------------------------------------------------
-- 2. revised: the same name gets a new revision, which becomes current.
select ql_api.task_create_v1(:'p', 'build', '{"argv": ["make", "release"], "pool": "tc-pool", "timeoutMs": 60000}')
  as revised \gset
select :'revised'::jsonb ->> 'revisionId' as rev2 \gset

select is(:'revised'::jsonb, jsonb_build_object('status', 'revised', 'taskId', :'task'::uuid, 'revisionId', :'rev2'::uuid),
  'the same name again is revised: the same task, a new revision');
select isnt(:'rev2'::uuid, :'rev1'::uuid, 'the new revision has an id of its own');
select is(pg_temp.current_of(:'task'), :'rev2'::uuid, 'the new revision becomes the task''s current one');
select is((select r.plan_json from ql.task_execution_revisions r where r.id = :'rev1'),
  '{"argv": ["make", "all"], "pool": "tc-pool", "env": {"CI": "1"}}'::jsonb,
  'the earlier revision is kept, its plan untouched');
select is((select count(*)::int from ql.tasks t where t.project_id = :'p' and t.name = 'build'), 1,
  'revising creates no second task of that name');
select is((select r.task_revision_id from ql.runs r where r.id = :'old_run'), :'rev1'::uuid,
  'a Run queued before the revision keeps the revision it pinned');

-- The old Run is offered with the plan it pinned, not the current one.
set local role ql_runtime;
select pg_temp.open_session(:'w') as ws \gset
select pg_temp.pull(:'w', :'ws') as offer \gset
reset role;
select is(array[:'offer'::jsonb ->> 'runId', :'offer'::jsonb -> 'plan' ->> 'argv'],
  array[:'old_run', '["make", "all"]'], 'the earlier queued Run is offered with its pinned plan (revision 1)');

-- A Run enqueued after the revision pins the new one.
set local role ql_runtime;
select ql_api.request_admission_v1(pg_temp.digest('tok-alice'), :'p', 'run.start',
  'POST /api/v3/projects/{projectId}/runs', 'tc.1') as adm \gset
select ql_api.run_enqueue_v1(:'alice', :'p', :'task', 'tc-m1', (:'adm'::jsonb ->> 'projectVersion')::bigint,
  (:'adm'::jsonb ->> 'bindingVersion')::bigint) as enq \gset
reset role;
select is(array[:'enq'::jsonb ->> 'status', :'enq'::jsonb ->> 'taskRevisionId'], array['enqueued', :'rev2'],
  'a Run enqueued after the revision pins the new current revision');

-- A third revision with an identical plan is still a new revision (revisions are never rewritten).
select ql_api.task_create_v1(:'p', 'build', '{"argv": ["make", "release"], "pool": "tc-pool", "timeoutMs": 60000}')
  as rev3_res \gset
select ok(:'rev3_res'::jsonb ->> 'status' = 'revised'
          and :'rev3_res'::jsonb ->> 'revisionId' not in (:'rev1', :'rev2')
          and pg_temp.current_of(:'task') = (:'rev3_res'::jsonb ->> 'revisionId')::uuid,
  'revising with an identical plan still adds a new current revision');
select is((select count(*)::int from ql.task_execution_revisions r where r.task_id = :'task'), 3,
  'the task now has three revisions');

-- Revisions are immutable.
select throws_ok(format($$update ql.task_execution_revisions set plan_json = '{"argv": ["rm", "-rf", "/"]}' where id = %L$$,
  :'rev1'), 'QLIMM', 'ql.task_execution_revisions is immutable: UPDATE refused',
  'rewriting a revision''s plan is refused: QLIMM');
select throws_ok(format($$delete from ql.task_execution_revisions where id = %L$$, :'rev1'), 'QLIMM',
  'ql.task_execution_revisions is immutable: DELETE refused', 'deleting a revision is refused: QLIMM');
select is((select r.plan_json from ql.task_execution_revisions r where r.id = :'rev1'),
  '{"argv": ["make", "all"], "pool": "tc-pool", "env": {"CI": "1"}}'::jsonb,
  'the refused rewrite left revision 1 as it was');

-- The same name in another Project is another task.
select ql_api.task_create_v1(:'q', 'build', '{"argv": ["true"]}') as q_build \gset
select ok(:'q_build'::jsonb ->> 'status' = 'created' and :'q_build'::jsonb ->> 'taskId' <> :'task',
  'the same name in another Project is created as a task of its own');
select is(pg_temp.current_of(:'task'), (:'rev3_res'::jsonb ->> 'revisionId')::uuid,
  'creating Q''s task leaves P''s task and its current revision alone');

-- Every documented maximum at once, and the minimal plan.
select is(ql_api.task_create_v1(:'p', 'limits', jsonb_build_object(
    'argv', (select jsonb_agg('a' || i) from generate_series(1, 256) i), 'env', '{}'::jsonb,
    'timeoutMs', 2147483647, 'maxAttempts', 100, 'retryBackoffMs', 2147483647, 'pool', repeat('p', 64))) ->> 'status',
  'created', 'a plan at every upper bound (256 argv, timeout and backoff 2^31-1, 100 attempts, 64-char pool) is created');
select is(ql_api.task_create_v1(:'p', 'minimal', '{"argv": ["true"], "timeoutMs": 1, "maxAttempts": 1, "retryBackoffMs": 0}')
  ->> 'status', 'created', 'a plan at every lower bound (timeout 1, one attempt, no backoff) is created');
select is(ql_api.task_create_v1(:'p', 'a' || repeat('b', 127), '{"argv": ["true"]}') ->> 'status', 'created',
  'a 128-character task name is created');

-- ---------------------------------------------------------------------------------------------
-- 3. invalid arguments: nothing changes.
select is(pg_temp.refused(null, 'build', '{"argv": ["true"]}'),
  '{"reason": "project_id", "status": "invalid"} and nothing changed', 'a NULL project is invalid and nothing changes');
select is(pg_temp.refused(:'p', null, '{"argv": ["true"]}'),
  '{"reason": "name", "status": "invalid"} and nothing changed', 'a NULL name is invalid and nothing changes');
select is(pg_temp.refused(:'p', '', '{"argv": ["true"]}'),
  '{"reason": "name", "status": "invalid"} and nothing changed', 'an empty name is invalid and nothing changes');
select is(pg_temp.refused(:'p', '_build', '{"argv": ["true"]}'),
  '{"reason": "name", "status": "invalid"} and nothing changed',
  'a name starting with an underscore is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build all', '{"argv": ["true"]}'),
  '{"reason": "name", "status": "invalid"} and nothing changed', 'a name with a space is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'a' || repeat('b', 128), '{"argv": ["true"]}'),
  '{"reason": "name", "status": "invalid"} and nothing changed', 'a 129-character name is invalid and nothing changes');
-- A name that reads as a uuid: ql_api.task_status_set_v1 and the CLI try a task id first, so it could never be named.
select is(pg_temp.refused(:'p', '0b5e6f2a-9c1d-4e3f-8a7b-6c5d4e3f2a1b', '{"argv": ["true"]}'),
  '{"detail": "a name that reads as a uuid would be taken for an id", "reason": "name", "status": "invalid"} and nothing changed', 'a name that is a uuid is invalid and nothing changes');
select is(pg_temp.refused(:'p', '0B5E6F2A9C1D4E3F8A7B6C5D4E3F2A1B', '{"argv": ["true"]}'),
  '{"detail": "a name that reads as a uuid would be taken for an id", "reason": "name", "status": "invalid"} and nothing changed', 'a uuid without hyphens, in capitals, is an invalid name and nothing changes');
select is(pg_temp.refused(:'p', :'q', '{"argv": ["true"]}'),
  '{"detail": "a name that reads as a uuid would be taken for an id", "reason": "name", "status": "invalid"} and nothing changed', 'a Project''s id as a task name is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', null),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'a NULL plan is invalid and nothing changes');

-- Every kind of bad plan ql.plan_is_valid refuses (an existing task: no revision is added either).
select is(pg_temp.refused(:'p', 'build', 'null'),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'a JSON null plan is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', '["make"]'),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'a plan that is an array is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', '"make"'),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'a plan that is a string is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', '{}'),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'a plan without argv is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', '{"argv": ["true"], "shell": "/bin/sh"}'),
  '{"reason": "plan", "status": "invalid"} and nothing changed',
  'a plan with an unknown key (shell) is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', '{"argv": ["true"], "TimeoutMs": 5}'),
  '{"reason": "plan", "status": "invalid"} and nothing changed',
  'keys are exact: TimeoutMs is an unknown key, invalid, nothing changes');
select is(pg_temp.refused(:'p', 'build', '{"argv": "make all"}'),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'argv as a string is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', '{"argv": null}'),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'argv null is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', '{"argv": []}'),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'an empty argv is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', jsonb_build_object('argv', (select jsonb_agg('a' || i) from generate_series(1, 257) i))),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'argv of 257 strings is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', '{"argv": ["sleep", 1]}'),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'a number in argv is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', '{"argv": ["true", null]}'),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'a null in argv is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', '{"argv": [["true"]]}'),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'a nested array in argv is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', '{"argv": ["true"], "env": ["CI=1"]}'),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'env as an array is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', '{"argv": ["true"], "env": {"CI": 1}}'),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'a number as an env value is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', '{"argv": ["true"], "env": {"CI": null}}'),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'a null env value is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', '{"argv": ["true"], "timeoutMs": 0}'),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'timeoutMs 0 is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', '{"argv": ["true"], "timeoutMs": -1}'),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'a negative timeoutMs is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', '{"argv": ["true"], "timeoutMs": 1.5}'),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'a fractional timeoutMs is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', '{"argv": ["true"], "timeoutMs": "1000"}'),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'timeoutMs as a string is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', '{"argv": ["true"], "timeoutMs": 2147483648}'),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'timeoutMs 2^31 is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', '{"argv": ["true"], "timeoutMs": null}'),
  '{"reason": "plan", "status": "invalid"} and nothing changed',
  'timeoutMs null is invalid (absent means no timeout) and nothing changes');
select is(pg_temp.refused(:'p', 'build', '{"argv": ["true"], "maxAttempts": 0}'),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'maxAttempts 0 is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', '{"argv": ["true"], "maxAttempts": 101}'),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'maxAttempts 101 is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', '{"argv": ["true"], "maxAttempts": "3"}'),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'maxAttempts as a string is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', '{"argv": ["true"], "retryBackoffMs": -1}'),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'a negative retryBackoffMs is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', '{"argv": ["true"], "retryBackoffMs": 0.5}'),
  '{"reason": "plan", "status": "invalid"} and nothing changed',
  'a fractional retryBackoffMs is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', '{"argv": ["true"], "retryBackoffMs": 2147483648}'),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'retryBackoffMs 2^31 is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', '{"argv": ["true"], "pool": "GPU"}'),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'an upper-case pool is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', '{"argv": ["true"], "pool": ""}'),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'an empty pool is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', jsonb_build_object('argv', '["true"]'::jsonb, 'pool', repeat('p', 65))),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'a 65-character pool is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'build', '{"argv": ["true"], "pool": 7}'),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'a number as the pool is invalid and nothing changes');
select is(pg_temp.refused(:'p', 'fresh-name', '{"argv": []}'),
  '{"reason": "plan", "status": "invalid"} and nothing changed',
  'a bad plan for a new name creates no task either: invalid, nothing changes');

-- ---------------------------------------------------------------------------------------------
-- 4. not_found: a missing Project, an archived Project.
select is(pg_temp.refused(gen_random_uuid(), 'build', '{"argv": ["true"]}'),
  '{"reason": "project", "status": "not_found"} and nothing changed',
  'a missing Project is not_found project and nothing changes');
select is(pg_temp.refused(:'a', 'build', '{"argv": ["true"]}'),
  '{"reason": "project", "status": "not_found"} and nothing changed',
  'an archived Project is not_found project and nothing changes');
select is(pg_temp.refused(gen_random_uuid(), 'bad name', '{"argv": ["true"]}'),
  '{"reason": "name", "status": "invalid"} and nothing changed',
  'arguments are checked before the Project is looked up: invalid name, nothing changes');

-- An archived Project's existing task is not revised either.
select pg_temp.mk_revision(:'a') as a_rev \gset
select t.name as a_task from ql.tasks t join ql.task_execution_revisions r on r.task_id = t.id where r.id = :'a_rev' \gset
select is(pg_temp.refused(:'a', :'a_task', '{"argv": ["false"]}'),
  '{"reason": "project", "status": "not_found"} and nothing changed',
  'an archived Project''s task is not revised: not_found project, nothing changes');
select is(pg_temp.current_of((select r.task_id from ql.task_execution_revisions r where r.id = :'a_rev')), :'a_rev'::uuid,
  'the archived Project''s task keeps its current revision');

-- ---------------------------------------------------------------------------------------------
-- 5. A plan signature is stored with its revision, as given; a bad one is invalid and changes nothing. No revision is
-- reused, so signing the same plan again (or not) makes a new revision and no earlier one loses or swaps its own.
select jsonb_build_object('keyId', '0123456789abcdef', 'signature', repeat('A', 85) || 'Q==') as sig_a,
       jsonb_build_object('keyId', 'fedcba9876543210', 'signature', repeat('b', 85) || 'w==') as sig_b \gset
select ql_api.task_create_v1(:'p', 'signed', '{"argv": ["deploy"]}', :'sig_a') ->> 'revisionId' as signed1 \gset
select ql_api.task_create_v1(p_project_id => :'p', p_name => 'signed', p_plan => '{"argv": ["deploy"]}')
  ->> 'revisionId' as signed2 \gset
select ql_api.task_create_v1(:'p', 'signed', '{"argv": ["deploy"]}', :'sig_b') ->> 'revisionId' as signed3 \gset
select is((select plan_signature from ql.task_execution_revisions where id = :'signed1'), :'sig_a'::jsonb,
  'a signed plan''s revision holds exactly the signature given');
select is((select plan_signature from ql.task_execution_revisions where id = :'signed2'), null,
  'a named call without p_plan_signature (existing callers) makes an unsigned revision');
select is((select plan_signature from ql.task_execution_revisions where id = :'signed3'), :'sig_b'::jsonb,
  'the same plan signed with another key is a third revision with that signature');
select is(array(select r.plan_signature ->> 'keyId' from ql.task_execution_revisions r
                 where r.id in (:'signed1', :'signed2', :'signed3') order by r.id = :'signed3', r.id = :'signed2'),
  array['0123456789abcdef', null, 'fedcba9876543210'],
  'three revisions: the first keeps its own signature (not swapped), the second none, the third the new one');
select is((select t.current_revision_id from ql.tasks t where t.project_id = :'p' and t.name = 'signed'), :'signed3'::uuid,
  'the last revision is current');
select is(pg_temp.refused(:'p', 'signed', '{"argv": ["deploy"]}', '{"keyId": "0123456789abcdef"}'),
  '{"reason": "plan_signature", "status": "invalid"} and nothing changed', 'a signature without its signature is invalid');
select is(pg_temp.refused(:'p', 'signed', '{"argv": ["deploy"]}', :'sig_a'::jsonb || '{"alg": "ed25519"}'),
  '{"reason": "plan_signature", "status": "invalid"} and nothing changed', 'a signature with another key is invalid');
select is(pg_temp.refused(:'p', 'signed', '{"argv": ["deploy"]}', :'sig_a'::jsonb || '{"keyId": "0123456789ABCDEF"}'),
  '{"reason": "plan_signature", "status": "invalid"} and nothing changed', 'an upper-case key id is invalid');
select is(pg_temp.refused(:'p', 'signed', '{"argv": ["deploy"]}', :'sig_a'::jsonb || '{"keyId": "0123456789abcde"}'),
  '{"reason": "plan_signature", "status": "invalid"} and nothing changed', 'a key id of 15 hex characters is invalid');
select is(pg_temp.refused(:'p', 'signed', '{"argv": ["deploy"]}',
            :'sig_a'::jsonb || jsonb_build_object('signature', repeat('A', 84) || 'Q==')),
  '{"reason": "plan_signature", "status": "invalid"} and nothing changed', 'a signature of 87 characters is invalid');
select is(pg_temp.refused(:'p', 'signed', '{"argv": ["deploy"]}',
            :'sig_a'::jsonb || jsonb_build_object('signature', repeat('A', 88))),
  '{"reason": "plan_signature", "status": "invalid"} and nothing changed',
  'a base64 text of 66 bytes (no padding) is invalid');
select is(pg_temp.refused(:'p', 'signed', '{"argv": ["deploy"]}',
            :'sig_a'::jsonb || jsonb_build_object('signature', repeat('A', 85) || 'B==')),
  '{"reason": "plan_signature", "status": "invalid"} and nothing changed',
  'a non-canonical base64 text (bits left over) is invalid');
select is(pg_temp.refused(:'p', 'signed', '{"argv": ["deploy"]}', :'sig_a'::jsonb || '{"signature": 7}'),
  '{"reason": "plan_signature", "status": "invalid"} and nothing changed', 'a number as the signature is invalid');
select is(pg_temp.refused(:'p', 'signed', '{"argv": ["deploy"]}', 'null'),
  '{"reason": "plan_signature", "status": "invalid"} and nothing changed', 'a JSON null signature is invalid');
select is(pg_temp.refused(:'p', 'signed', '{"argv": ["deploy"]}', jsonb_build_array(:'sig_a'::jsonb)),
  '{"reason": "plan_signature", "status": "invalid"} and nothing changed', 'an array of signatures is invalid');
select throws_ok(format($$insert into ql.task_execution_revisions (task_id, project_id, plan_json, plan_signature,
                                                                    executor_revision_id)
                         values (%L, %L, '{"argv": ["x"]}', '{"keyId": "x"}', '00000000-0000-4000-8000-000000000001')$$,
                        :'task', :'p'),
  '23514', null, 'the table refuses a malformed signature too');

-- A plan's bundle must be a complete stored bundle.
select encode(sha256('bundle bytes'::bytea), 'hex') as bd, encode(sha256('never stored'::bytea), 'hex') as missing,
       encode(sha256('half'::bytea), 'hex') as half \gset
select ql_api.bundle_put_v1(:'bd', 12, 0, 'bundle bytes'::bytea) ->> 'status' as put_ok \gset
select ql_api.bundle_seal_v1(:'bd', '[{"path": "run.sh", "kind": "file", "size": 12, "mode": 493}]') ->> 'status'
  as sealed_ok \gset
insert into ql.bundles (digest, size_bytes, chunk_count) values (:'half', 4, 1);
select is(:'put_ok' || ' ' || :'sealed_ok', 'stored sealed', 'setup: a bundle is uploaded and sealed');
select is(pg_temp.refused(:'p', 'bundled', jsonb_build_object('argv', '["sh", "run.sh"]'::jsonb, 'bundle', :'missing')),
  format('{"detail": "%s", "reason": "bundle", "status": "not_found"} and nothing changed', :'missing'),
  'a plan naming a bundle never stored is not_found bundle, its digest as detail, and nothing changes');
select is(pg_temp.refused(:'p', 'bundled', jsonb_build_object('argv', '["sh", "run.sh"]'::jsonb, 'bundle', :'half')),
  format('{"detail": "%s", "reason": "bundle", "status": "not_found"} and nothing changed', :'half'),
  'a plan naming an upload not sealed is not_found bundle too');
select is(pg_temp.refused(:'p', 'bundled', jsonb_build_object('argv', '["sh", "run.sh"]'::jsonb, 'bundle', upper(:'bd'))),
  '{"reason": "plan", "status": "invalid"} and nothing changed', 'a bundle digest in upper case is an invalid plan');
select ql_api.task_create_v1(:'p', 'bundled', jsonb_build_object('argv', '["sh", "run.sh"]'::jsonb, 'bundle', :'bd'),
                             :'sig_a') as bundled \gset
select is(:'bundled'::jsonb ->> 'status', 'created', 'a plan naming a sealed bundle is created');
select is((select r.plan_json ->> 'bundle' from ql.task_execution_revisions r where r.id = (:'bundled'::jsonb ->> 'revisionId')::uuid),
  :'bd', 'its revision names the bundle');

-- The whole file wrote revisions through the API only: each one's task points back to its Project.
select is((select count(*)::int from ql.task_execution_revisions r join ql.tasks t on t.id = r.task_id
            where r.project_id <> t.project_id), 0, 'every revision belongs to its task''s Project');
select is((select count(*)::int from ql.tasks t where t.current_revision_id is null), 0,
  'no task was left without a current revision');

select * from finish();
rollback;
