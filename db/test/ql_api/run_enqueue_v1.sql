-- Tests ql_api.run_enqueue_v1: a Run pinned to the task's current revision with its run.queued event, the
-- idempotent mutation (replay, conflict), not_found, every policy fence re-verified in the transaction
-- (docs/architecture.md §4 item 11, decision 0000 (ADR-0118 §6) by analogy) and invalid arguments.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(81);

-- The shell's admission for run.start (or another permission): the answer, with the admitted versions.
create function pg_temp.admit(p_name text, p_project uuid, p_permission text default 'run.start')
returns jsonb language sql
return ql_api.request_admission_v1(sha256(convert_to('tok-' || p_name, 'UTF8')), p_project, p_permission,
                                   'POST /api/v3/projects/{projectId}/runs', 'enq.' || p_name);

-- ---------------------------------------------------------------------------------------------
-- Structure: the one wire command, SECURITY DEFINER, EXECUTE for the runtime role only.
select has_function('ql_api', 'run_enqueue_v1', array['uuid', 'uuid', 'uuid', 'text', 'bigint', 'bigint'],
  'enqueue exists with (subject, project, task, mutation id, admitted project version, admitted binding version)');
select is_definer('ql_api', 'run_enqueue_v1', array['uuid', 'uuid', 'uuid', 'text', 'bigint', 'bigint'],
  'enqueue is SECURITY DEFINER');
select function_returns('ql_api', 'run_enqueue_v1', array['uuid', 'uuid', 'uuid', 'text', 'bigint', 'bigint'], 'jsonb',
  'enqueue answers a jsonb result');
select is((select p.proconfig from pg_proc p where p.oid = 'ql_api.run_enqueue_v1(uuid, uuid, uuid, text, bigint, bigint)'::regprocedure),
  array['search_path=pg_catalog, pg_temp'], 'enqueue pins search_path to pg_catalog, pg_temp');
select function_privs_are('ql_api', 'run_enqueue_v1', array['uuid', 'uuid', 'uuid', 'text', 'bigint', 'bigint'],
  'ql_runtime', array['EXECUTE'], 'the runtime role may execute enqueue');
select function_privs_are('ql_api', 'run_enqueue_v1', array['uuid', 'uuid', 'uuid', 'text', 'bigint', 'bigint'],
  'public', array[]::text[], 'PUBLIC may not execute enqueue');
set local role ql_runtime;
select throws_ok($$select count(*) from ql.runs$$, '42501', 'permission denied for schema ql',
  'the runtime role cannot create a Run outside the API');
reset role;

-- ---------------------------------------------------------------------------------------------
-- Setup. Project P: task T with an old revision (pool-old) and its CURRENT revision (pool-new); task T2
-- (no pool: default); a task without revision. Project Q with task TQ. Project R (archived later).
select pg_temp.mk_project('enq-p') as p, pg_temp.mk_project('enq-q') as q, pg_temp.mk_project('enq-r') as r \gset
select pg_temp.mk_revision(:'p', '{"argv": ["true"], "pool": "pool-old"}') as rev_old,
       pg_temp.mk_revision(:'p') as rev2, pg_temp.mk_revision(:'q') as revq,
       pg_temp.mk_revision(:'r') as revr \gset
select (select task_id from ql.task_execution_revisions where id = :'rev_old') as t,
       (select task_id from ql.task_execution_revisions where id = :'rev2') as t2,
       (select task_id from ql.task_execution_revisions where id = :'revq') as tq,
       (select task_id from ql.task_execution_revisions where id = :'revr') as tr \gset
insert into ql.task_execution_revisions (task_id, project_id, plan_json, executor_revision_id)
values (:'t', :'p', '{"argv": ["echo", "hi"], "pool": "pool-new"}', '00000000-0000-4000-8000-000000000001')
returning id as rev_cur \gset
update ql.tasks set current_revision_id = :'rev_cur' where id = :'t';
insert into ql.tasks (project_id, name) values (:'p', 'no-revision') returning id as t_norev \gset
select pg_temp.mk_subject('alice') as alice, pg_temp.mk_subject('viewer') as viewer,
       pg_temp.mk_subject('agent', 'agent') as agent, pg_temp.mk_subject('dave') as dave,
       pg_temp.mk_subject('carol') as carol \gset
insert into ql.role_bindings (project_id, subject_id, role)
values (:'p', :'alice', 'operator'), (:'p', :'viewer', 'viewer'), (:'p', :'agent', 'operator'),
       (:'p', :'dave', 'operator'), (:'r', :'alice', 'operator');

set local role ql_runtime;
select pg_temp.admit('alice', :'p') as adm \gset
reset role;
select (:'adm'::jsonb ->> 'projectVersion')::bigint as pv, (:'adm'::jsonb ->> 'bindingVersion')::bigint as bv \gset
select is(:'adm'::jsonb ->> 'decision', 'allow', 'setup: alice (operator) is admitted run.start on P');

-- ---------------------------------------------------------------------------------------------
-- enqueued: a Run pinned to the task's CURRENT revision, pool from its plan, queued, one run.queued event.
select (select count(*) from ql.runs) as runs_before, (select count(*) from ql.run_events) as events_before,
       ql.now_ms() as t0 \gset
set local role ql_runtime;
select ql_api.run_enqueue_v1(:'alice', :'p', :'t', 'enq-1', :pv, :bv) as res \gset
reset role;
select ql.now_ms() as t1 \gset
select :'res'::jsonb ->> 'runId' as run, (:'res'::jsonb ->> 'queuedAtMs')::bigint as queued \gset
select is(:'res'::jsonb ->> 'status', 'enqueued', 'a first enqueue answers enqueued');
select is(:'res'::jsonb, jsonb_build_object('status', 'enqueued', 'runId', :'run'::uuid, 'taskRevisionId', :'rev_cur'::uuid,
                                            'queuedAtMs', :queued),
  'enqueued answers exactly the Run, the task''s current revision and queuedAtMs');
select ok(:queued between :t0 and :t1, 'queuedAtMs is database time read during the call');
select results_eq(
  format($$select project_id, task_id, task_revision_id, pool, status::text, version, event_sequence, queued_at_ms::bigint,
                  created_at_ms::bigint, cancel_requested_at_ms::bigint, cancel_reason::text, attempt_count,
                  current_attempt_id, ended_at_ms::bigint
             from ql.runs where id = %L$$, :'run'),
  format($$values (%L::uuid, %L::uuid, %L::uuid, 'pool-new'::text, 'queued'::text, 2::bigint, 1::bigint, %s::bigint,
                   %s::bigint, null::bigint, null::text, 0, null::uuid, null::bigint)$$,
         :'p', :'t', :'rev_cur', :queued, :queued),
  'the Run is queued in P, pinned to the current revision (not the old one), in the plan''s pool, version 2 / event_sequence 1');
select results_eq(
  format($$select sequence, type, actor_kind::text, actor_id, attempt_id, payload, occurred_at_ms::bigint, dedupe_key
             from ql.run_events where run_id = %L order by sequence$$, :'run'),
  format($$values (1::bigint, 'run.queued'::text, 'user'::text, %L::uuid, null::uuid,
                   jsonb_build_object('taskId', %L::uuid, 'taskRevisionId', %L::uuid, 'mutationId', 'enq-1'),
                   %s::bigint, %L::text)$$,
         :'alice', :'t', :'rev_cur', :queued, 'run.queued:' || :'run'),
  'exactly one run.queued event, sequence 1, actor user = the subject, payload task/revision/mutation, at queuedAtMs');
select ok(pg_temp.stream_ok(:'run'), 'the Run''s stream is contiguous and its version counts its one event');
select is((select count(*) from ql.runs) - :runs_before, 1::bigint, 'exactly one Run was created');
select is((select count(*) from ql.run_events) - :events_before, 1::bigint, 'exactly one event was appended');
select results_eq(
  format($$select command_digest::bytea, result, created_at_ms::bigint from ql.mutations
            where subject_id = %L and mutation_id = 'enq-1'$$, :'alice'),
  format($$values (sha256(convert_to(%L, 'UTF8')), %L::jsonb, %s::bigint)$$,
         'run.enqueue:' || :'p' || ':' || :'t', :'res', :queued),
  'the mutation is recorded once: the command digest (project, task) and the answered result');

-- already_enqueued: the exact replay answers the same Run and writes nothing.
select pg_temp.pstate() as before \gset
set local role ql_runtime;
select is(ql_api.run_enqueue_v1(:'alice', :'p', :'t', 'enq-1', :pv, :bv),
  :'res'::jsonb || '{"status": "already_enqueued"}',
  'the exact replay answers already_enqueued with the same runId, revision and queuedAtMs');
reset role;
select is(pg_temp.pstate(), :'before', 'the replay creates no second Run, no event, no mutation row: nothing changes');
insert into ql.task_execution_revisions (task_id, project_id, plan_json, executor_revision_id)
values (:'t', :'p', '{"argv": ["false"], "pool": "pool-newer"}', '00000000-0000-4000-8000-000000000001')
returning id as rev_newer \gset
update ql.tasks set current_revision_id = :'rev_newer' where id = :'t';
select pg_temp.pstate() as before \gset
set local role ql_runtime;
select is(ql_api.run_enqueue_v1(:'alice', :'p', :'t', 'enq-1', :pv, :bv),
  :'res'::jsonb || '{"status": "already_enqueued"}',
  'a replay after the task moved to a newer revision still answers the recorded Run and revision');
reset role;
select is(pg_temp.pstate(), :'before', 'that replay changes nothing either');

-- mutation_conflict: the same mutationId for another task.
set local role ql_runtime;
select is(ql_api.run_enqueue_v1(:'alice', :'p', :'t2', 'enq-1', :pv, :bv),
  '{"status": "fenced", "reason": "mutation_conflict"}', 'the same mutationId for another task is fenced mutation_conflict');
reset role;
select is(pg_temp.pstate(), :'before', 'mutation_conflict is fenced and nothing changes');

-- A mutation id belongs to its subject: an agent (run.start needs no approval) may use 'enq-1' too.
set local role ql_runtime;
select pg_temp.admit('agent', :'p') as agent_adm \gset
reset role;
select is(:'agent_adm'::jsonb ->> 'decision', 'allow', 'setup: an agent operator is admitted run.start (no approval)');
set local role ql_runtime;
select ql_api.run_enqueue_v1(:'agent', :'p', :'t2', 'enq-1', (:'agent_adm'::jsonb ->> 'projectVersion')::bigint,
                             (:'agent_adm'::jsonb ->> 'bindingVersion')::bigint) as agent_res \gset
reset role;
select is(:'agent_res'::jsonb ->> 'status', 'enqueued', 'another subject''s same mutationId is a new mutation: enqueued');
select is((select (r.pool, r.task_revision_id)::text from ql.runs r where r.id = (:'agent_res'::jsonb ->> 'runId')::uuid),
  format('(default,%s)', :'rev2'), 'a plan without pool queues the Run in the default pool');
select is((select e.actor_id from ql.run_events e where e.run_id = (:'agent_res'::jsonb ->> 'runId')::uuid), :'agent'::uuid,
  'the agent''s run.queued event names the agent as actor');
select is((select e.actor_kind::text from ql.run_events e where e.run_id = (:'agent_res'::jsonb ->> 'runId')::uuid), 'agent',
  'an agent''s enqueue is attributed to actor_kind agent, not user');

-- ---------------------------------------------------------------------------------------------
-- not_found task: another Project's task, a missing task, a task without revision.
select pg_temp.pstate() as before \gset
set local role ql_runtime;
select is(ql_api.run_enqueue_v1(:'alice', :'p', :'tq', 'enq-nf-1', :pv, :bv), '{"status": "not_found", "reason": "task"}',
  'a task of another Project is not_found task');
reset role;
select is(pg_temp.pstate(), :'before', 'another Project''s task is not_found and nothing changes');
set local role ql_runtime;
select is(ql_api.run_enqueue_v1(:'alice', :'p', gen_random_uuid(), 'enq-nf-2', :pv, :bv), '{"status": "not_found", "reason": "task"}',
  'a missing task is not_found task');
reset role;
select is(pg_temp.pstate(), :'before', 'a missing task is not_found and nothing changes');
set local role ql_runtime;
select is(ql_api.run_enqueue_v1(:'alice', :'p', :'t_norev', 'enq-nf-3', :pv, :bv), '{"status": "not_found", "reason": "task"}',
  'a task without a revision is not_found task');
reset role;
select is(pg_temp.pstate(), :'before', 'a task without revision is not_found and nothing changes');

-- ---------------------------------------------------------------------------------------------
-- Policy fences: not_found project, role_insufficient, subject_disabled, project_archived, project_changed,
-- binding_revoked, binding_changed. None writes a Run, an event or a mutation row.
set local role ql_runtime;
select is(ql_api.run_enqueue_v1(:'alice', gen_random_uuid(), :'t', 'enq-f-1', :pv, :bv),
  '{"status": "not_found", "reason": "project"}', 'a missing project is not_found project');
reset role;
select is(pg_temp.pstate(), :'before', 'a missing project is not_found and nothing changes');
set local role ql_runtime;
select is(ql_api.run_enqueue_v1(:'alice', :'q', :'tq', 'enq-f-2', 1, 1),
  '{"status": "not_found", "reason": "project"}', 'a project where the subject has no binding is not_found project');
reset role;
select is(pg_temp.pstate(), :'before', 'a project without binding is not_found and nothing changes');

set local role ql_runtime;
select pg_temp.admit('viewer', :'p', 'run.read') as viewer_adm \gset
reset role;
select pg_temp.pstate() as before \gset
set local role ql_runtime;
select is(ql_api.run_enqueue_v1(:'viewer', :'p', :'t', 'enq-f-3', (:'viewer_adm'::jsonb ->> 'projectVersion')::bigint,
                                (:'viewer_adm'::jsonb ->> 'bindingVersion')::bigint),
  '{"status": "fenced", "reason": "role_insufficient"}', 'a viewer (admitted only run.read) is fenced role_insufficient');
reset role;
select is(pg_temp.pstate(), :'before', 'role_insufficient is fenced and nothing changes');

set local role ql_runtime;
select pg_temp.admit('dave', :'p') as dave_adm \gset
reset role;
update ql.subjects set status = 'disabled' where id = :'dave';
select pg_temp.pstate() as before \gset
set local role ql_runtime;
select is(ql_api.run_enqueue_v1(:'dave', :'p', :'t', 'enq-f-4', (:'dave_adm'::jsonb ->> 'projectVersion')::bigint,
                                (:'dave_adm'::jsonb ->> 'bindingVersion')::bigint),
  '{"status": "fenced", "reason": "subject_disabled"}', 'a subject disabled after admission is fenced subject_disabled');
reset role;
select is(pg_temp.pstate(), :'before', 'subject_disabled is fenced and nothing changes');

set local role ql_runtime;
select pg_temp.admit('alice', :'r') as r_adm \gset
reset role;
update ql.projects set status = 'archived', version = version + 1 where id = :'r';
select pg_temp.pstate() as before \gset
set local role ql_runtime;
select is(ql_api.run_enqueue_v1(:'alice', :'r', :'tr', 'enq-f-5', (:'r_adm'::jsonb ->> 'projectVersion')::bigint,
                                (:'r_adm'::jsonb ->> 'bindingVersion')::bigint),
  '{"status": "fenced", "reason": "project_archived"}', 'a project archived after admission is fenced project_archived');
reset role;
select is(pg_temp.pstate(), :'before', 'project_archived is fenced and nothing changes');

-- project_changed: role_binding_set_v1 on ANY binding of the project (here carol's) bumps its version.
select ql_api.role_binding_set_v1(:'p', :'carol', 'owner', true) ->> 'status' as set_carol \gset
select pg_temp.pstate() as before \gset
set local role ql_runtime;
select is(ql_api.run_enqueue_v1(:'alice', :'p', :'t', 'enq-f-6', :pv, :bv),
  '{"status": "fenced", "reason": "project_changed"}',
  'a binding change of another subject after admission bumps the project: fenced project_changed');
reset role;
select is(pg_temp.pstate(), :'before', 'project_changed is fenced and nothing changes');

-- binding_revoked: alice's binding revoked by role_binding_set_v1 after a fresh admission.
set local role ql_runtime;
select pg_temp.admit('alice', :'p') as adm \gset
reset role;
select (:'adm'::jsonb ->> 'projectVersion')::bigint as pv, (:'adm'::jsonb ->> 'bindingVersion')::bigint as bv \gset
select ql_api.role_binding_set_v1(:'p', :'alice', 'operator', false) as revoke \gset
select pg_temp.pstate() as before \gset
set local role ql_runtime;
select ql_api.run_enqueue_v1(:'alice', :'p', :'t', 'enq-f-7', :pv, :bv) as res \gset
reset role;
select is(:'res'::jsonb ->> 'status', 'fenced', 'a binding revoked after admission is fenced');
select is(:'res'::jsonb, '{"status": "fenced", "reason": "binding_revoked"}', 'a binding revoked after admission is fenced binding_revoked');
select is(pg_temp.pstate(), :'before', 'the revocation fence changes nothing');
set local role ql_runtime;
select is(ql_api.run_enqueue_v1(:'alice', :'p', :'t', 'enq-f-8', (:'revoke'::jsonb ->> 'projectVersion')::bigint, :bv),
  '{"status": "fenced", "reason": "binding_revoked"}',
  'at the current project version a revoked binding is fenced binding_revoked');
reset role;
select is(pg_temp.pstate(), :'before', 'binding_revoked is fenced and nothing changes');

-- binding_changed: alice re-granted, admitted, then her role changed (operator -> admin, still allowed).
select ql_api.role_binding_set_v1(:'p', :'alice', 'operator', true) ->> 'status' as regrant \gset
set local role ql_runtime;
select pg_temp.admit('alice', :'p') as adm \gset
reset role;
select (:'adm'::jsonb ->> 'projectVersion')::bigint as pv, (:'adm'::jsonb ->> 'bindingVersion')::bigint as bv \gset
select ql_api.role_binding_set_v1(:'p', :'alice', 'admin', true) as change \gset
select pg_temp.pstate() as before \gset
set local role ql_runtime;
select ql_api.run_enqueue_v1(:'alice', :'p', :'t', 'enq-f-9', :pv, :bv) as res \gset
reset role;
select is(:'res'::jsonb ->> 'status', 'fenced', 'a role changed after admission is fenced');
select is(:'res'::jsonb, '{"status": "fenced", "reason": "binding_changed"}', 'a role changed after admission is fenced binding_changed');
select is(pg_temp.pstate(), :'before', 'the role-change fence changes nothing');
set local role ql_runtime;
select is(ql_api.run_enqueue_v1(:'alice', :'p', :'t', 'enq-f-10', (:'change'::jsonb ->> 'projectVersion')::bigint, :bv),
  '{"status": "fenced", "reason": "binding_changed"}',
  'at the current project version an older binding version is fenced binding_changed');
reset role;
select is(pg_temp.pstate(), :'before', 'binding_changed is fenced and nothing changes');

-- A fresh admission after the change passes the fence again.
set local role ql_runtime;
select pg_temp.admit('alice', :'p') as adm \gset
select ql_api.run_enqueue_v1(:'alice', :'p', :'t', 'enq-2', (:'adm'::jsonb ->> 'projectVersion')::bigint,
                             (:'adm'::jsonb ->> 'bindingVersion')::bigint) as res2 \gset
reset role;
select is(:'res2'::jsonb ->> 'status', 'enqueued', 're-admitted with the new versions, the admin enqueues again');
select is(:'res2'::jsonb ->> 'taskRevisionId', :'rev_newer', 'the new Run pins the task''s revision current now');

-- ---------------------------------------------------------------------------------------------
-- invalid: every argument, checked before anything is read or written.
select pg_temp.pstate() as before, repeat('m', 129) as m129 \gset
set local role ql_runtime;
select is(ql_api.run_enqueue_v1(null, :'p', :'t', 'enq-i', 1, 1), '{"status": "invalid", "reason": "subject_id"}',
  'a NULL subject is invalid');
reset role;
select is(pg_temp.pstate(), :'before', 'NULL subject is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.run_enqueue_v1(:'alice', null, :'t', 'enq-i', 1, 1), '{"status": "invalid", "reason": "project_id"}',
  'a NULL project is invalid');
reset role;
select is(pg_temp.pstate(), :'before', 'NULL project is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.run_enqueue_v1(:'alice', :'p', null, 'enq-i', 1, 1), '{"status": "invalid", "reason": "task_id"}',
  'a NULL task is invalid');
reset role;
select is(pg_temp.pstate(), :'before', 'NULL task is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.run_enqueue_v1(:'alice', :'p', :'t', null, 1, 1), '{"status": "invalid", "reason": "mutation_id"}',
  'a NULL mutation id is invalid');
reset role;
select is(pg_temp.pstate(), :'before', 'NULL mutation id is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.run_enqueue_v1(:'alice', :'p', :'t', '', 1, 1), '{"status": "invalid", "reason": "mutation_id"}',
  'an empty mutation id is invalid');
reset role;
select is(pg_temp.pstate(), :'before', 'empty mutation id is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.run_enqueue_v1(:'alice', :'p', :'t', 'bad id', 1, 1), '{"status": "invalid", "reason": "mutation_id"}',
  'a mutation id with a space is invalid');
reset role;
select is(pg_temp.pstate(), :'before', 'mutation id with a space is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.run_enqueue_v1(:'alice', :'p', :'t', 'enq/1', 1, 1), '{"status": "invalid", "reason": "mutation_id"}',
  'a mutation id with a slash is invalid');
reset role;
select is(pg_temp.pstate(), :'before', 'mutation id with a slash is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.run_enqueue_v1(:'alice', :'p', :'t', 'enq-é', 1, 1), '{"status": "invalid", "reason": "mutation_id"}',
  'a mutation id outside [A-Za-z0-9._:-] is invalid');
reset role;
select is(pg_temp.pstate(), :'before', 'non-ASCII mutation id is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.run_enqueue_v1(:'alice', :'p', :'t', :'m129', 1, 1), '{"status": "invalid", "reason": "mutation_id"}',
  'a 129-character mutation id is invalid');
reset role;
select is(pg_temp.pstate(), :'before', '129-character mutation id is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.run_enqueue_v1(:'alice', :'p', :'t', 'enq-i', null, 1), '{"status": "invalid", "reason": "admitted_version"}',
  'a NULL admitted project version is invalid');
reset role;
select is(pg_temp.pstate(), :'before', 'NULL admitted project version is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.run_enqueue_v1(:'alice', :'p', :'t', 'enq-i', 1, null), '{"status": "invalid", "reason": "admitted_version"}',
  'a NULL admitted binding version is invalid');
reset role;
select is(pg_temp.pstate(), :'before', 'NULL admitted binding version is invalid and nothing changes');

-- Every Run this file created has a contiguous stream.
select is((select count(*) from ql.runs r where r.project_id = :'p' and not pg_temp.stream_ok(r.id)), 0::bigint,
  'every enqueued Run has a contiguous event stream');

select * from finish();
rollback;
