-- Tests ql.policy_fence: the in-transaction re-verification of an admitted user mutation (decision 0000 (ADR-0118 §6)),
-- every branch and its precedence, called as the owner would (superuser; the helper is private).
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(53);

-- ---------------------------------------------------------------------------------------------
-- Structure: a private helper (invoker rights: it runs inside the SECURITY DEFINER caller).
select has_function('ql', 'policy_fence', array['uuid', 'uuid', 'text', 'bigint', 'bigint'],
  'the policy fence exists with (subject, project, permission, admitted project version, admitted binding version)');
select isnt_definer('ql', 'policy_fence', array['uuid', 'uuid', 'text', 'bigint', 'bigint'],
  'the policy fence is a private helper with invoker rights (its callers are SECURITY DEFINER)');
select function_returns('ql', 'policy_fence', array['uuid', 'uuid', 'text', 'bigint', 'bigint'], 'jsonb',
  'the policy fence answers NULL or a typed jsonb result');
select function_privs_are('ql', 'policy_fence', array['uuid', 'uuid', 'text', 'bigint', 'bigint'],
  'ql_runtime', array[]::text[], 'the runtime role may not execute the policy fence');
select function_privs_are('ql', 'policy_fence', array['uuid', 'uuid', 'text', 'bigint', 'bigint'],
  'public', array[]::text[], 'PUBLIC may not execute the policy fence');
set local role ql_runtime;
select throws_ok($$select ql.policy_fence(gen_random_uuid(), gen_random_uuid(), 'run.stop', 1, 1)$$,
  '42501', 'permission denied for schema ql', 'the runtime role cannot call the policy fence directly');
reset role;

-- ---------------------------------------------------------------------------------------------
-- Setup: project P at version 5; one subject per role with distinct binding versions; an agent;
-- a disabled subject; a revoked binding; a subject without binding; an archived project A.
select pg_temp.mk_project('fence-p') as p, pg_temp.mk_project('fence-a') as a, gen_random_uuid() as nobody \gset
update ql.projects set version = 5 where id = :'p';
update ql.projects set status = 'archived', version = 2 where id = :'a';
select pg_temp.mk_subject('owner') as s_owner, pg_temp.mk_subject('admin') as s_admin,
       pg_temp.mk_subject('operator') as s_operator, pg_temp.mk_subject('viewer') as s_viewer,
       pg_temp.mk_subject('agent', 'agent') as s_agent, pg_temp.mk_subject('agentviewer', 'agent') as s_agentviewer,
       pg_temp.mk_subject('system', 'system') as s_system,
       pg_temp.mk_subject('disabled', 'user', 'disabled') as s_disabled,
       pg_temp.mk_subject('disabledloose', 'user', 'disabled') as s_disabledloose,
       pg_temp.mk_subject('revoked') as s_revoked, pg_temp.mk_subject('loose') as s_loose \gset
insert into ql.role_bindings (project_id, subject_id, role, version, active)
values (:'p', :'s_owner', 'owner', 1, true), (:'p', :'s_admin', 'admin', 2, true),
       (:'p', :'s_operator', 'operator', 3, true), (:'p', :'s_viewer', 'viewer', 4, true),
       (:'p', :'s_agent', 'operator', 1, true), (:'p', :'s_agentviewer', 'viewer', 1, true),
       (:'p', :'s_system', 'operator', 1, true), (:'p', :'s_disabled', 'operator', 1, true),
       (:'p', :'s_revoked', 'operator', 2, false), (:'a', :'s_operator', 'operator', 1, true);
create temp table ctx as
select :'p'::uuid as p, :'s_owner'::uuid as s_owner, :'s_admin'::uuid as s_admin,
       :'s_operator'::uuid as s_operator, :'s_viewer'::uuid as s_viewer;

-- ---------------------------------------------------------------------------------------------
-- NULL = the admitted policy still holds: the role/permission table of ql.role_allows.
select results_eq(
  $$select r.role, pm.permission, ql.policy_fence(r.subject, c.p, pm.permission, 5, r.version)
      from ctx c
      cross join lateral (values ('owner', c.s_owner, 1), ('admin', c.s_admin, 2), ('operator', c.s_operator, 3),
                                 ('viewer', c.s_viewer, 4)) r(role, subject, version)
      cross join (values ('run.read'), ('run.start'), ('run.stop')) pm(permission)
     order by 1, 2$$,
  $$values ('admin'::text, 'run.read'::text, null::jsonb), ('admin', 'run.start', null), ('admin', 'run.stop', null),
           ('operator', 'run.read', null), ('operator', 'run.start', null), ('operator', 'run.stop', null),
           ('owner', 'run.read', null), ('owner', 'run.start', null), ('owner', 'run.stop', null),
           ('viewer', 'run.read', null),
           ('viewer', 'run.start', '{"status": "fenced", "reason": "role_insufficient"}'::jsonb),
           ('viewer', 'run.stop', '{"status": "fenced", "reason": "role_insufficient"}'::jsonb)$$,
  'owner, admin and operator keep run.read/start/stop, a viewer keeps only run.read (ql.role_allows)');
select is(ql.policy_fence(:'s_agent', :'p', 'run.start', 5, 1), null,
  'an agent with the operator role may still start a Run (approval is only for run.stop)');
select is(ql.policy_fence(:'s_agent', :'p', 'run.read', 5, 1), null, 'an agent may still read');
select is(ql.policy_fence(:'s_system', :'p', 'run.stop', 5, 1), null,
  'a system subject with the operator role may stop (approval is for agents only)');
select is(ql.policy_fence(:'s_operator', :'a', 'run.read', 2, 1), '{"status": "fenced", "reason": "project_archived"}',
  'the fence guards mutations: even run.read on an archived project is fenced project_archived');

-- not_found: a missing project, a missing subject and a missing binding look the same.
select pg_temp.pstate() as before \gset
select is(ql.policy_fence(:'s_operator', :'nobody', 'run.stop', 5, 3), '{"status": "not_found", "reason": "project"}',
  'a missing project is not_found project');
select is(ql.policy_fence(:'nobody', :'p', 'run.stop', 5, 3), '{"status": "not_found", "reason": "project"}',
  'a missing subject is not_found project');
select is(ql.policy_fence(:'s_loose', :'p', 'run.stop', 5, 1), '{"status": "not_found", "reason": "project"}',
  'a subject without a binding in the project sees it as not_found project (no enumeration)');
select is(ql.policy_fence(:'s_disabledloose', :'p', 'run.stop', 5, 1), '{"status": "not_found", "reason": "project"}',
  'not_found wins over subject_disabled: a disabled subject without a binding learns nothing more');
select is(ql.policy_fence(:'s_loose', :'a', 'run.stop', 99, 99), '{"status": "not_found", "reason": "project"}',
  'not_found wins over project_archived and stale versions');
select is(ql.policy_fence(null, :'p', 'run.stop', 5, 1), '{"status": "not_found", "reason": "project"}',
  'a NULL subject is not_found project, never an error');
select is(ql.policy_fence(:'s_operator', null, 'run.stop', 5, 1), '{"status": "not_found", "reason": "project"}',
  'a NULL project is not_found project, never an error');

-- subject_disabled.
select is(ql.policy_fence(:'s_disabled', :'p', 'run.stop', 5, 1), '{"status": "fenced", "reason": "subject_disabled"}',
  'a disabled subject is fenced subject_disabled');
select is(ql.policy_fence(:'s_disabled', :'p', 'run.stop', 1, 9), '{"status": "fenced", "reason": "subject_disabled"}',
  'subject_disabled wins over stale project and binding versions');
update ql.projects set status = 'archived' where id = :'p';
select is(ql.policy_fence(:'s_disabled', :'p', 'run.stop', 5, 1), '{"status": "fenced", "reason": "subject_disabled"}',
  'subject_disabled wins over project_archived');

-- project_archived.
select is(ql.policy_fence(:'s_operator', :'p', 'run.stop', 5, 3), '{"status": "fenced", "reason": "project_archived"}',
  'an archived project is fenced project_archived (run.stop)');
select is(ql.policy_fence(:'s_operator', :'p', 'run.start', 5, 3), '{"status": "fenced", "reason": "project_archived"}',
  'an archived project is fenced project_archived (run.start)');
select is(ql.policy_fence(:'s_operator', :'p', 'run.stop', 4, 2), '{"status": "fenced", "reason": "project_archived"}',
  'project_archived wins over stale project and binding versions');
select is(ql.policy_fence(:'s_viewer', :'p', 'run.stop', 5, 4), '{"status": "fenced", "reason": "project_archived"}',
  'project_archived wins over role_insufficient');
update ql.projects set status = 'active' where id = :'p';

-- project_changed.
select is(ql.policy_fence(:'s_operator', :'p', 'run.stop', 4, 3), '{"status": "fenced", "reason": "project_changed"}',
  'an older admitted project version is fenced project_changed');
select is(ql.policy_fence(:'s_operator', :'p', 'run.stop', 6, 3), '{"status": "fenced", "reason": "project_changed"}',
  'a project version from the future is fenced project_changed');
select is(ql.policy_fence(:'s_viewer', :'p', 'run.stop', 4, 4), '{"status": "fenced", "reason": "project_changed"}',
  'project_changed wins over role_insufficient');

-- binding_revoked.
select is(ql.policy_fence(:'s_revoked', :'p', 'run.stop', 5, 2), '{"status": "fenced", "reason": "binding_revoked"}',
  'an inactive binding at the admitted versions is fenced binding_revoked');
select is(ql.policy_fence(:'s_revoked', :'p', 'run.stop', 5, 1), '{"status": "fenced", "reason": "binding_revoked"}',
  'binding_revoked wins over binding_changed');
select is(ql.policy_fence(:'s_revoked', :'p', 'run.read', 5, 2), '{"status": "fenced", "reason": "binding_revoked"}',
  'a revoked binding keeps no permission at all, not even run.read');

-- binding_changed.
select is(ql.policy_fence(:'s_operator', :'p', 'run.stop', 5, 2), '{"status": "fenced", "reason": "binding_changed"}',
  'an older admitted binding version is fenced binding_changed');
select is(ql.policy_fence(:'s_operator', :'p', 'run.stop', 5, 4), '{"status": "fenced", "reason": "binding_changed"}',
  'a binding version from the future is fenced binding_changed');
select is(ql.policy_fence(:'s_viewer', :'p', 'run.stop', 5, 3), '{"status": "fenced", "reason": "binding_changed"}',
  'binding_changed wins over role_insufficient');

-- role_insufficient.
select is(ql.policy_fence(:'s_viewer', :'p', 'run.start', 5, 4), '{"status": "fenced", "reason": "role_insufficient"}',
  'a viewer starting a Run is fenced role_insufficient');
select is(ql.policy_fence(:'s_owner', :'p', 'run.delete', 5, 1), '{"status": "fenced", "reason": "role_insufficient"}',
  'a permission outside the table is fenced role_insufficient even for an owner');
select is(ql.policy_fence(:'s_owner', :'p', null, 5, 1), '{"status": "fenced", "reason": "role_insufficient"}',
  'a NULL permission is fenced role_insufficient, never allowed');
select is(ql.policy_fence(:'s_agentviewer', :'p', 'run.stop', 5, 1), '{"status": "fenced", "reason": "role_insufficient"}',
  'role_insufficient wins over approval_required (an agent viewer cannot stop at all)');

-- approval_required.
select is(ql.policy_fence(:'s_agent', :'p', 'run.stop', 5, 1), '{"status": "fenced", "reason": "approval_required"}',
  'an agent with the operator role stopping a Run is fenced approval_required');

-- NULL admitted versions never pass.
select is(ql.policy_fence(:'s_operator', :'p', 'run.stop', null, 3), '{"status": "fenced", "reason": "project_changed"}',
  'a NULL admitted project version never passes the fence (project_changed)');
select is(ql.policy_fence(:'s_operator', :'p', 'run.stop', 5, null), '{"status": "fenced", "reason": "binding_changed"}',
  'a NULL admitted binding version never passes the fence (binding_changed)');

-- The fence reads only: none of the calls above changed a row (the archive toggles were restored).
select is(pg_temp.pstate(), :'before', 'the policy fence writes nothing');

-- The project row is locked FOR SHARE first (a policy change must wait for the caller's transaction),
-- even when the answer is not_found. A fresh project with no binding: no foreign-key lock on its row.
select pg_temp.mk_project('fence-lock') as l \gset
select is((select xmax::text from ql.projects where id = :'l'), '0', 'setup: the fresh project row carries no lock');
select is(ql.policy_fence(:'s_loose', :'l', 'run.stop', 1, 1), '{"status": "not_found", "reason": "project"}',
  'setup: a subject without binding is not_found there');
select is((select xmax::text from ql.projects where id = :'l'), (txid_current() % 4294967296)::text,
  'the fence leaves the project row locked by this transaction until it ends');
select is((select xmax::text from ql.role_bindings where project_id = :'p' and subject_id = :'s_operator'), '0',
  'the fence only reads the role binding');

-- ---------------------------------------------------------------------------------------------
-- Through the policy writer: role_binding_set_v1 bumps the project version with every binding change.
select pg_temp.mk_project('fence-w') as w, pg_temp.mk_subject('writer') as s_writer, pg_temp.mk_subject('other') as s_other \gset
select ql_api.role_binding_set_v1(:'w', :'s_writer', 'operator', true) as set0 \gset
select (:'set0'::jsonb ->> 'projectVersion')::bigint as w_pv, (:'set0'::jsonb ->> 'bindingVersion')::bigint as w_bv \gset
select is(ql.policy_fence(:'s_writer', :'w', 'run.stop', :w_pv, :w_bv), null,
  'setup: the versions answered by role_binding_set_v1 pass the fence');
select ql_api.role_binding_set_v1(:'w', :'s_other', 'viewer', true) as set1 \gset
select is(ql.policy_fence(:'s_writer', :'w', 'run.stop', :w_pv, :w_bv), '{"status": "fenced", "reason": "project_changed"}',
  'a change of ANY binding of the project fences earlier admissions project_changed');
select (:'set1'::jsonb ->> 'projectVersion')::bigint as w_pv \gset
select ql_api.role_binding_set_v1(:'w', :'s_writer', 'operator', false) as set2 \gset
select is(ql.policy_fence(:'s_writer', :'w', 'run.stop', :w_pv, :w_bv) ->> 'status', 'fenced',
  'a revocation by role_binding_set_v1 after admission is fenced');
select is(ql.policy_fence(:'s_writer', :'w', 'run.stop', :w_pv, :w_bv), '{"status": "fenced", "reason": "binding_revoked"}',
  'a revocation by role_binding_set_v1 after admission is reported binding_revoked');
select ql_api.role_binding_set_v1(:'w', :'s_writer', 'operator', true) as set3 \gset
select (:'set3'::jsonb ->> 'projectVersion')::bigint as w3_pv, (:'set3'::jsonb ->> 'bindingVersion')::bigint as w3_bv \gset
select is(ql.policy_fence(:'s_writer', :'w', 'run.stop', :w3_pv, :w3_bv), null,
  'setup: re-granted operator, the versions answered by role_binding_set_v1 pass the fence again');
select ql_api.role_binding_set_v1(:'w', :'s_writer', 'viewer', true) as set4 \gset
select is(ql.policy_fence(:'s_writer', :'w', 'run.stop', :w3_pv, :w3_bv) ->> 'status', 'fenced',
  'a role change operator -> viewer by role_binding_set_v1 after admission is fenced');
select is(ql.policy_fence(:'s_writer', :'w', 'run.stop', :w3_pv, :w3_bv), '{"status": "fenced", "reason": "binding_changed"}',
  'a role change by role_binding_set_v1 after admission is reported binding_changed');

select * from finish();
rollback;
