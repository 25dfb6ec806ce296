begin isolation level serializable;
-- Tests ql_api.run_cancel_request_v1: a user's cancellation (decision 0000 (ADR-0118 §6, evidence 9); docs/architecture.md §4 item 7) as the
-- least-privilege runtime role, after admission: accepted with database time and an actor-bound event, exact
-- replay, already_requested / already_terminal, every policy fence BEFORE the Run is written (revocation, role
-- change, project drift, agent approval), the same not_found for another Project's Run and a missing Run,
-- mutation conflicts, and a reason the caller cannot choose. The QLISO refusal outside SERIALIZABLE is in
-- run_cancel_request_v1_isolation.sql (isolation is per transaction).
\ir ../fixtures.psql
\set QUIET 1
select plan(82);

-- The shell's admission (run.stop unless told): the answer, with the admitted versions on allow.
create function pg_temp.admit(p_name text, p_project uuid, p_permission text default 'run.stop')
returns jsonb language sql
return ql_api.request_admission_v1(sha256(convert_to('tok-' || p_name, 'UTF8')), p_project, p_permission,
                                   'POST /api/v3/projects/{projectId}/runs/{runId}/cancellation',
                                   'cx.' || p_name || '.' || substr(md5(random()::text), 1, 8));

-- A Run's cancellation-relevant columns: (status, version, event_sequence, cancel_requested_at_ms, cancel_reason).
create function pg_temp.run_row(p_run uuid) returns text language sql
return (select (r.status, r.version, r.event_sequence, r.cancel_requested_at_ms, r.cancel_reason)::text
          from ql.runs r where r.id = p_run);

create function pg_temp.cancel_events(p_run uuid) returns bigint language sql
return (select count(*) from ql.run_events e where e.run_id = p_run and e.type = 'run.cancel_requested');

-- ---------------------------------------------------------------------------------------------
-- Structure: the one wire command, SECURITY DEFINER, EXECUTE for the runtime role only.
select has_function('ql_api', 'run_cancel_request_v1', array['uuid', 'uuid', 'uuid', 'text', 'bigint', 'bigint'],
  'cancellation exists with (subject, project, run, mutation id, admitted project version, admitted binding version)');
select is_definer('ql_api', 'run_cancel_request_v1', array['uuid', 'uuid', 'uuid', 'text', 'bigint', 'bigint'],
  'cancellation is SECURITY DEFINER');
select function_returns('ql_api', 'run_cancel_request_v1', array['uuid', 'uuid', 'uuid', 'text', 'bigint', 'bigint'], 'jsonb',
  'cancellation answers a jsonb result');
select is((select p.proconfig from pg_proc p where p.oid = 'ql_api.run_cancel_request_v1(uuid, uuid, uuid, text, bigint, bigint)'::regprocedure),
  array['search_path=pg_catalog, pg_temp'], 'cancellation pins search_path to pg_catalog, pg_temp');
select function_privs_are('ql_api', 'run_cancel_request_v1', array['uuid', 'uuid', 'uuid', 'text', 'bigint', 'bigint'],
  'ql_runtime', array['EXECUTE'], 'the runtime role may execute cancellation');
select function_privs_are('ql_api', 'run_cancel_request_v1', array['uuid', 'uuid', 'uuid', 'text', 'bigint', 'bigint'],
  'public', array[]::text[], 'PUBLIC may not execute cancellation');

-- The reason cannot be chosen: there is no parameter for it, and the runtime role cannot reach the helper.
select is((select p.proargnames from pg_proc p where p.oid = 'ql_api.run_cancel_request_v1(uuid, uuid, uuid, text, bigint, bigint)'::regprocedure),
  array['p_subject_id', 'p_project_id', 'p_run_id', 'p_mutation_id', 'p_admitted_project_version', 'p_admitted_binding_version'],
  'the arguments are subject, project, run, mutation id and the admitted versions: no reason');
select is((select count(*) from pg_proc p where p.pronamespace = 'ql_api'::regnamespace and p.proname like 'run_cancel_request%'
             and exists (select 1 from unnest(p.proargnames) a where a ilike '%reason%')), 0::bigint,
  'no version of the cancellation command takes a reason');
set local role ql_runtime;
select throws_ok($$select ql.run_cancel_intent(gen_random_uuid(), 'shutdown', 'system', null, 1)$$,
  '42501', 'permission denied for schema ql', 'the runtime role cannot write an intent of its own reason outside the API');
reset role;

-- ---------------------------------------------------------------------------------------------
-- Setup: project P with queued Runs r1..r5; project Q with Run rq. alice: operator of P; bob: admin of P;
-- carol: viewer of P (her binding changes drift the project); agent: an agent operator of P.
select pg_temp.mk_project('cx-p') as p, pg_temp.mk_project('cx-q') as q \gset
select pg_temp.mk_revision(:'p') as rev, pg_temp.mk_revision(:'q') as revq \gset
select pg_temp.mk_run(:'rev') as r1, pg_temp.mk_run(:'rev') as r2, pg_temp.mk_run(:'rev') as r3,
       pg_temp.mk_run(:'rev') as r4, pg_temp.mk_run(:'rev') as r5, pg_temp.mk_run(:'revq') as rq \gset
select pg_temp.mk_subject('alice') as alice, pg_temp.mk_subject('bob') as bob, pg_temp.mk_subject('carol') as carol,
       pg_temp.mk_subject('agent', 'agent') as agent \gset
insert into ql.role_bindings (project_id, subject_id, role)
values (:'p', :'alice', 'operator'), (:'p', :'bob', 'admin'), (:'p', :'carol', 'viewer'), (:'p', :'agent', 'operator');

-- Admission first, as the shell does: alice is allowed run.stop at project version 1, binding version 1.
set local role ql_runtime;
select pg_temp.admit('alice', :'p') as adm \gset
reset role;
select (:'adm'::jsonb ->> 'projectVersion')::bigint as pv, (:'adm'::jsonb ->> 'bindingVersion')::bigint as bv \gset
select is(jsonb_build_array(:'adm'::jsonb ->> 'decision', :pv, :bv), '["allow", 1, 1]'::jsonb,
  'setup: alice (operator) is admitted run.stop on P at project version 1, binding version 1');
select is(pg_temp.run_row(:'r1'), '(queued,2,1,,)', 'setup: r1 is queued at version 2, event sequence 1, no intent');

-- ---------------------------------------------------------------------------------------------
-- accepted (202): the intent with database time, reason user, Run version/event sequence +1, one actor-bound event.
select ql.now_ms() as t0, (select string_agg(r::text, ',' order by r.id) from ql.runs r where r.id <> :'r1') as others \gset
set local role ql_runtime;
select ql_api.run_cancel_request_v1(:'alice', :'p', :'r1', 'cx-1', :pv, :bv) as res \gset
reset role;
select ql.now_ms() as t1 \gset
select (:'res'::jsonb ->> 'cancelRequestedAtMs')::bigint as at \gset
select is(:'res'::jsonb ->> 'status', 'accepted', 'a first cancellation by an admitted operator is accepted (202)');
select is(:'res'::jsonb, jsonb_build_object('status', 'accepted', 'runId', :'r1'::uuid, 'runStatus', 'queued',
                                            'cancelRequestedAtMs', :at, 'reason', 'user'),
  'accepted answers the Run, its unchanged status, cancelRequestedAtMs and reason user');
select ok(:at between :t0 and :t1, 'cancelRequestedAtMs is database time read during the call');
select is(pg_temp.run_row(:'r1'), format('(queued,3,2,%s,user)', :at),
  'the Run stores the intent (time, reason user) with version +1 and event sequence +1, still queued');
select results_eq(
  format($$select sequence, actor_kind::text, actor_id, attempt_id, payload, occurred_at_ms::bigint, dedupe_key
             from ql.run_events where run_id = %L and type = 'run.cancel_requested'$$, :'r1'),
  format($$values (2::bigint, 'user'::text, %L::uuid, null::uuid, '{"reason": "user", "cancelRequestedAtMs": %s}'::jsonb,
                   %s::bigint, %L::text)$$, :'alice', :at, :at, 'run.cancel_requested:' || :'r1'),
  'exactly one run.cancel_requested event: sequence 2, actor user = alice, payload {reason user, cancelRequestedAtMs}');
select ok(pg_temp.stream_ok(:'r1'), 'the Run''s stream stays contiguous and its version counts every event');
select is((select string_agg(r::text, ',' order by r.id) from ql.runs r where r.id <> :'r1'), :'others',
  'no other Run is touched');
select results_eq(
  format($$select command_digest::bytea, result, created_at_ms::bigint from ql.mutations
            where subject_id = %L and mutation_id = 'cx-1'$$, :'alice'),
  format($$values (sha256(convert_to(%L, 'UTF8')), %L::jsonb, %s::bigint)$$,
         'run.cancel:' || :'p' || ':' || :'r1', jsonb_build_object('status', 'accepted', 'runId', :'r1'::uuid), :at),
  'the mutation is recorded once with the command digest (project, run) and its outcome');

-- already_requested (200): the exact replay answers the same intent and writes nothing.
select pg_temp.pstate() as before \gset
set local role ql_runtime;
select is(ql_api.run_cancel_request_v1(:'alice', :'p', :'r1', 'cx-1', :pv, :bv),
  jsonb_build_object('status', 'already_requested', 'runId', :'r1'::uuid, 'runStatus', 'queued',
                     'cancelRequestedAtMs', :at, 'reason', 'user'),
  'the exact replay answers already_requested with the same cancelRequestedAtMs and reason');
reset role;
select is(pg_temp.pstate(), :'before', 'the replay writes no second event, no version, no mutation row: nothing changes');

-- already_requested under another mutationId: no event, but the new mutation is recorded.
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.run_cancel_request_v1(:'alice', :'p', :'r1', 'cx-2', :pv, :bv),
  jsonb_build_object('status', 'already_requested', 'runId', :'r1'::uuid, 'runStatus', 'queued',
                     'cancelRequestedAtMs', :at, 'reason', 'user'),
  'another mutationId on the same Run answers already_requested');
reset role;
select is(pg_temp.state(), :'before', 'already_requested writes no event and leaves the Run alone');
select is(pg_temp.cancel_events(:'r1'), 1::bigint, 'the Run still has exactly one run.cancel_requested event');
select is((select result from ql.mutations where subject_id = :'alice' and mutation_id = 'cx-2'),
  jsonb_build_object('status', 'already_requested', 'runId', :'r1'::uuid), 'the new mutation id is recorded with its outcome');

-- An admin may cancel as well.
set local role ql_runtime;
select pg_temp.admit('bob', :'p') as bob_adm \gset
select ql_api.run_cancel_request_v1(:'bob', :'p', :'r5', 'cx-bob', (:'bob_adm'::jsonb ->> 'projectVersion')::bigint,
                                    (:'bob_adm'::jsonb ->> 'bindingVersion')::bigint) as bob_res \gset
reset role;
select is(jsonb_build_array(:'bob_res'::jsonb ->> 'status', :'bob_res'::jsonb ->> 'reason',
                            (select e.actor_id::text from ql.run_events e where e.run_id = :'r5' and e.type = 'run.cancel_requested')),
  jsonb_build_array('accepted', 'user', :'bob'), 'an admin''s cancellation is accepted, reason user, event actor = the admin');

-- ---------------------------------------------------------------------------------------------
-- already_terminal (200): a Run driven to succeeded by its Worker. No intent, no event.
select pg_temp.mk_scenario() as w \gset
set local role ql_runtime;
select o, o ->> 'sessionId' as s, o ->> 'projectId' as p, o ->> 'runId' as r from pg_temp.offer_at(:'w', 'running') o \gset t_
select pg_temp.complete(:'w', :'t_s', :'t_o', 1, 0, null, '[]') ->> 'runStatus' as t_done \gset
reset role;
select is(:'t_done'::text, 'succeeded', 'setup: the Worker completed the Run with exit 0: succeeded');
insert into ql.role_bindings (project_id, subject_id, role) values (:'t_p', :'alice', 'operator');
set local role ql_runtime;
select pg_temp.admit('alice', :'t_p') as t_adm \gset
reset role;
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.run_cancel_request_v1(:'alice', :'t_p', :'t_r', 'cx-term', (:'t_adm'::jsonb ->> 'projectVersion')::bigint,
                                       (:'t_adm'::jsonb ->> 'bindingVersion')::bigint),
  jsonb_build_object('status', 'already_terminal', 'runId', :'t_r'::uuid, 'runStatus', 'succeeded',
                     'cancelRequestedAtMs', null, 'reason', null),
  'a succeeded Run answers already_terminal with no intent');
reset role;
select is(pg_temp.state(), :'before', 'already_terminal writes no intent, no event, no version');
select is(pg_temp.cancel_events(:'t_r'), 0::bigint, 'the ended Run has no run.cancel_requested event');
select is((select result from ql.mutations where subject_id = :'alice' and mutation_id = 'cx-term'),
  jsonb_build_object('status', 'already_terminal', 'runId', :'t_r'::uuid), 'the mutation id is recorded with already_terminal');

-- A Run with a timeout intent (written by lease control) answers already_requested with reason timeout.
select pg_temp.mk_scenario('{"argv": ["sleep", "60"], "timeoutMs": 5000}') as w \gset
set local role ql_runtime;
select o, o ->> 'sessionId' as s, o ->> 'projectId' as p, o ->> 'runId' as r from pg_temp.offer_at(:'w', 'running') o \gset h_
reset role;
select pg_temp.age_attempt(:'h_o', 10000) as aged \gset
set local role ql_runtime;
select pg_temp.lease(:'w', :'h_s', :'h_o', 1) as h_lease \gset
reset role;
select (:'h_lease'::jsonb ->> 'cancelRequestedAtMs')::bigint as h_at \gset
select is(jsonb_build_array(:'h_lease'::jsonb ->> 'status', :'h_lease'::jsonb ->> 'stopReason'), '["stop_requested", "timeout"]',
  'setup: lease control wrote the durable timeout intent (deadline passed)');
insert into ql.role_bindings (project_id, subject_id, role) values (:'h_p', :'alice', 'operator');
set local role ql_runtime;
select pg_temp.admit('alice', :'h_p') as h_adm \gset
reset role;
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.run_cancel_request_v1(:'alice', :'h_p', :'h_r', 'cx-timeout', (:'h_adm'::jsonb ->> 'projectVersion')::bigint,
                                       (:'h_adm'::jsonb ->> 'bindingVersion')::bigint),
  jsonb_build_object('status', 'already_requested', 'runId', :'h_r'::uuid, 'runStatus', 'running',
                     'cancelRequestedAtMs', :h_at, 'reason', 'timeout'),
  'a Run with a timeout intent answers already_requested with reason timeout and its time (a user cannot rewrite it)');
reset role;
select is(pg_temp.state(), :'before', 'the timeout intent is kept: no event, no version');

-- ---------------------------------------------------------------------------------------------
-- Revocation fence (evidence 9): alice admitted, then her binding revoked by role_binding_set_v1.
set local role ql_runtime;
select pg_temp.admit('alice', :'p') as adm \gset
reset role;
select (:'adm'::jsonb ->> 'projectVersion')::bigint as pv, (:'adm'::jsonb ->> 'bindingVersion')::bigint as bv \gset
select ql_api.role_binding_set_v1(:'p', :'alice', 'operator', false) as revoke \gset
select pg_temp.pstate() as before \gset
set local role ql_runtime;
select ql_api.run_cancel_request_v1(:'alice', :'p', :'r2', 'cx-revoked', :pv, :bv) as res \gset
reset role;
select is(:'res'::jsonb ->> 'status', 'fenced', 'a cancellation after the binding was revoked is fenced (409)');
select is(:'res'::jsonb, '{"status": "fenced", "reason": "binding_revoked"}',
  'a cancellation after the binding was revoked is fenced binding_revoked');
select is(pg_temp.pstate(), :'before', 'the revocation fence changes nothing: no intent, no event, no mutation row');
select is(jsonb_build_array(pg_temp.run_row(:'r2'), pg_temp.cancel_events(:'r2')), '["(queued,2,1,,)", 0]'::jsonb,
  'the Run keeps no intent and no run.cancel_requested event');
set local role ql_runtime;
select is(ql_api.run_cancel_request_v1(:'alice', :'p', :'r2', 'cx-revoked', (:'revoke'::jsonb ->> 'projectVersion')::bigint, :bv),
  '{"status": "fenced", "reason": "binding_revoked"}', 'even at the current project version the revoked binding is fenced binding_revoked');
reset role;
select is(pg_temp.pstate(), :'before', 'binding_revoked changes nothing');

-- Role change operator -> viewer after admission.
select ql_api.role_binding_set_v1(:'p', :'alice', 'operator', true) ->> 'status' as regrant \gset
set local role ql_runtime;
select pg_temp.admit('alice', :'p') as adm \gset
reset role;
select (:'adm'::jsonb ->> 'projectVersion')::bigint as pv, (:'adm'::jsonb ->> 'bindingVersion')::bigint as bv \gset
select ql_api.role_binding_set_v1(:'p', :'alice', 'viewer', true) as demote \gset
select ok((:'demote'::jsonb ->> 'bindingVersion')::bigint > :bv, 'setup: the role change moved the binding version');
select pg_temp.pstate() as before \gset
set local role ql_runtime;
select ql_api.run_cancel_request_v1(:'alice', :'p', :'r2', 'cx-demoted', :pv, :bv) as res \gset
reset role;
select is(:'res'::jsonb ->> 'status', 'fenced', 'a cancellation after a role change operator -> viewer is fenced');
select is(:'res'::jsonb, '{"status": "fenced", "reason": "binding_changed"}',
  'a cancellation after a role change operator -> viewer is fenced binding_changed');
select is(pg_temp.pstate(), :'before', 'the role-change fence changes nothing');
set local role ql_runtime;
select pg_temp.admit('alice', :'p') ->> 'reason' as stop_as_viewer, pg_temp.admit('alice', :'p', 'run.read') as adm \gset
reset role;
select is(:'stop_as_viewer'::text, 'role.insufficient', 're-admission of the viewer for run.stop is denied role.insufficient');
select pg_temp.pstate() as before \gset
set local role ql_runtime;
select is(ql_api.run_cancel_request_v1(:'alice', :'p', :'r2', 'cx-demoted', (:'adm'::jsonb ->> 'projectVersion')::bigint,
                                       (:'adm'::jsonb ->> 'bindingVersion')::bigint),
  '{"status": "fenced", "reason": "role_insufficient"}',
  'with the re-admitted (current) versions a viewer is fenced role_insufficient');
reset role;
select is(pg_temp.pstate(), :'before', 'role_insufficient changes nothing');

-- Project drift: another subject's binding changes after alice's admission.
select ql_api.role_binding_set_v1(:'p', :'alice', 'operator', true) ->> 'status' as restore \gset
set local role ql_runtime;
select pg_temp.admit('alice', :'p') as adm \gset
reset role;
select (:'adm'::jsonb ->> 'projectVersion')::bigint as pv, (:'adm'::jsonb ->> 'bindingVersion')::bigint as bv \gset
select ql_api.role_binding_set_v1(:'p', :'carol', 'operator', true) ->> 'status' as drift \gset
select pg_temp.pstate() as before \gset
set local role ql_runtime;
select is(ql_api.run_cancel_request_v1(:'alice', :'p', :'r2', 'cx-drift', :pv, :bv),
  '{"status": "fenced", "reason": "project_changed"}', 'a project version bumped after admission is fenced project_changed');
reset role;
select is(pg_temp.pstate(), :'before', 'project_changed changes nothing');

-- Agent: even with the operator role, run.stop needs a human approval.
set local role ql_runtime;
select pg_temp.admit('agent', :'p') as agent_adm \gset
reset role;
select is(jsonb_build_array(:'agent_adm'::jsonb ->> 'decision', :'agent_adm'::jsonb -> 'projectVersion'),
  '["require_approval", null]'::jsonb, 'setup: admission answers require_approval to an agent, without versions');
select pg_temp.pstate() as before \gset
select (select version from ql.projects where id = :'p') as cur_pv,
       (select version from ql.role_bindings where project_id = :'p' and subject_id = :'agent') as agent_bv \gset
set local role ql_runtime;
select is(ql_api.run_cancel_request_v1(:'agent', :'p', :'r2', 'cx-agent', :cur_pv, :agent_bv),
  '{"status": "fenced", "reason": "approval_required"}',
  'an agent with the operator role, even at the current versions, is fenced approval_required');
reset role;
select is(pg_temp.pstate(), :'before', 'approval_required changes nothing: no intent, no event, no mutation row');

-- ---------------------------------------------------------------------------------------------
-- not_found (404): another Project's Run and a missing Run answer the same.
set local role ql_runtime;
select pg_temp.admit('alice', :'p') as adm \gset
reset role;
select (:'adm'::jsonb ->> 'projectVersion')::bigint as pv, (:'adm'::jsonb ->> 'bindingVersion')::bigint as bv \gset
select pg_temp.pstate() as before \gset
set local role ql_runtime;
select ql_api.run_cancel_request_v1(:'alice', :'p', :'rq', 'cx-cross', :pv, :bv) as cross_res,
       ql_api.run_cancel_request_v1(:'alice', :'p', gen_random_uuid(), 'cx-missing', :pv, :bv) as missing_res \gset
reset role;
select is(:'cross_res'::jsonb, '{"status": "not_found", "reason": "run"}', 'another Project''s Run is not_found run');
select is(:'cross_res'::jsonb, :'missing_res'::jsonb, 'another Project''s Run and a missing Run answer exactly the same');
select is(pg_temp.pstate(), :'before', 'not_found changes nothing: the other Project''s Run keeps no intent, no mutation row');
set local role ql_runtime;
select is(ql_api.run_cancel_request_v1(:'alice', :'q', :'rq', 'cx-q', 1, 1),
  '{"status": "not_found", "reason": "project"}', 'a project where the subject has no binding is not_found project');
reset role;
select is(pg_temp.pstate(), :'before', 'not_found project changes nothing');

-- mutation_conflict: the same mutationId for another Run.
set local role ql_runtime;
select is(ql_api.run_cancel_request_v1(:'alice', :'p', :'r3', 'cx-1', :pv, :bv),
  '{"status": "fenced", "reason": "mutation_conflict"}', 'the same mutationId for another Run is fenced mutation_conflict');
reset role;
select is(pg_temp.pstate(), :'before', 'mutation_conflict changes nothing');
select is(jsonb_build_array(pg_temp.run_row(:'r3'), pg_temp.cancel_events(:'r3')), '["(queued,2,1,,)", 0]'::jsonb,
  'the other Run keeps no intent and no event');

-- ---------------------------------------------------------------------------------------------
-- invalid: every argument, checked before anything is read or written.
select repeat('m', 129) as m129 \gset
set local role ql_runtime;
select is(ql_api.run_cancel_request_v1(null, :'p', :'r3', 'cx-i', :pv, :bv), '{"status": "invalid", "reason": "subject_id"}',
  'a NULL subject is invalid');
reset role;
select is(pg_temp.pstate(), :'before', 'NULL subject is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.run_cancel_request_v1(:'alice', null, :'r3', 'cx-i', :pv, :bv), '{"status": "invalid", "reason": "project_id"}',
  'a NULL project is invalid');
reset role;
select is(pg_temp.pstate(), :'before', 'NULL project is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.run_cancel_request_v1(:'alice', :'p', null, 'cx-i', :pv, :bv), '{"status": "invalid", "reason": "run_id"}',
  'a NULL Run is invalid');
reset role;
select is(pg_temp.pstate(), :'before', 'NULL Run is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.run_cancel_request_v1(:'alice', :'p', :'r3', null, :pv, :bv), '{"status": "invalid", "reason": "mutation_id"}',
  'a NULL mutation id is invalid');
reset role;
select is(pg_temp.pstate(), :'before', 'NULL mutation id is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.run_cancel_request_v1(:'alice', :'p', :'r3', '', :pv, :bv), '{"status": "invalid", "reason": "mutation_id"}',
  'an empty mutation id is invalid');
reset role;
select is(pg_temp.pstate(), :'before', 'empty mutation id is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.run_cancel_request_v1(:'alice', :'p', :'r3', 'cx i', :pv, :bv), '{"status": "invalid", "reason": "mutation_id"}',
  'a mutation id with a space is invalid');
reset role;
select is(pg_temp.pstate(), :'before', 'mutation id with a space is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.run_cancel_request_v1(:'alice', :'p', :'r3', :'m129', :pv, :bv), '{"status": "invalid", "reason": "mutation_id"}',
  'a 129-character mutation id is invalid');
reset role;
select is(pg_temp.pstate(), :'before', '129-character mutation id is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.run_cancel_request_v1(:'alice', :'p', :'r3', 'cx-i', null, :bv), '{"status": "invalid", "reason": "admitted_version"}',
  'a NULL admitted project version is invalid');
reset role;
select is(pg_temp.pstate(), :'before', 'NULL admitted project version is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.run_cancel_request_v1(:'alice', :'p', :'r3', 'cx-i', :pv, null), '{"status": "invalid", "reason": "admitted_version"}',
  'a NULL admitted binding version is invalid');
reset role;
select is(pg_temp.pstate(), :'before', 'NULL admitted binding version is invalid and nothing changes');

-- ---------------------------------------------------------------------------------------------
-- What the whole file wrote: one mutation row per new mutation id that reached the Run, none on fences.
select results_eq(
  format($$select mutation_id, result ->> 'status' from ql.mutations where subject_id = %L order by mutation_id$$, :'alice'),
  $$values ('cx-1'::text, 'accepted'::text), ('cx-2', 'already_requested'), ('cx-term', 'already_terminal'),
           ('cx-timeout', 'already_requested')$$,
  'alice''s mutations: one row per new mutation id answered accepted/already_*, none for fences, not_found or invalid');
select is((select count(*) from ql.mutations where subject_id in (:'agent', :'carol')), 0::bigint,
  'the agent''s fenced attempt recorded no mutation');
select is((select array_agg(distinct e.payload ->> 'reason') from ql.run_events e
            where e.type = 'run.cancel_requested' and e.actor_kind in ('user', 'agent')), array['user'],
  'every intent a subject wrote carries reason user');
select is((select count(*) from ql.runs r where r.cancel_reason = 'user'
             and r.id not in (select e.run_id from ql.run_events e where e.type = 'run.cancel_requested' and e.actor_kind = 'user')),
  0::bigint, 'every user intent on a Run has its actor-bound event');

select * from finish();
rollback;
