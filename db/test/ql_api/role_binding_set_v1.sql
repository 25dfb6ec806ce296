-- Tests ql_api.role_binding_set_v1: grant, role change and revocation bump the binding AND the project version
-- (so ql.policy_fence fences earlier admissions), invalid and not_found change nothing, and the runtime role
-- (the shell) cannot change policy (docs/architecture.md §8, decision 0000 (ADR-0118 §6)).
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(42);

-- A binding as text: (role, version, active).
create function pg_temp.binding(p_project uuid, p_subject uuid) returns text language sql
return (select (b.role, b.version, b.active)::text from ql.role_bindings b
         where b.project_id = p_project and b.subject_id = p_subject);

create function pg_temp.pversion(p_project uuid) returns bigint language sql
return (select p.version from ql.projects p where p.id = p_project);

-- ---------------------------------------------------------------------------------------------
-- Structure: an operator's command, SECURITY DEFINER, not granted to the runtime role.
select has_function('ql_api', 'role_binding_set_v1', array['uuid', 'uuid', 'text', 'boolean'],
  'role_binding_set exists with (project, subject, role, active)');
select is_definer('ql_api', 'role_binding_set_v1', array['uuid', 'uuid', 'text', 'boolean'],
  'role_binding_set is SECURITY DEFINER');
select function_returns('ql_api', 'role_binding_set_v1', array['uuid', 'uuid', 'text', 'boolean'], 'jsonb',
  'role_binding_set answers a jsonb result');
select is((select p.proconfig from pg_proc p where p.oid = 'ql_api.role_binding_set_v1(uuid, uuid, text, boolean)'::regprocedure),
  array['search_path=pg_catalog, pg_temp'], 'role_binding_set pins search_path to pg_catalog, pg_temp');
select function_privs_are('ql_api', 'role_binding_set_v1', array['uuid', 'uuid', 'text', 'boolean'],
  'ql_runtime', array[]::text[], 'the runtime role (the shell) may not change policy');
select function_privs_are('ql_api', 'role_binding_set_v1', array['uuid', 'uuid', 'text', 'boolean'],
  'public', array[]::text[], 'PUBLIC may not change policy');

-- ---------------------------------------------------------------------------------------------
-- Setup: project P, an untouched project Q, subjects S and T.
select pg_temp.mk_project('rb-p') as p, pg_temp.mk_project('rb-q') as q,
       pg_temp.mk_subject('s') as s, pg_temp.mk_subject('t') as t \gset
insert into ql.role_bindings (project_id, subject_id, role) values (:'q', :'s', 'viewer');

select pg_temp.pstate() as before \gset
set local role ql_runtime;
select throws_ok(format($$select ql_api.role_binding_set_v1(%L, %L, 'owner', true)$$, :'p', :'s'),
  '42501', 'permission denied for function role_binding_set_v1',
  'the runtime role cannot grant itself a role: 42501');
reset role;
select is(pg_temp.pstate(), :'before', 'the refused call changes nothing');

-- ---------------------------------------------------------------------------------------------
-- Grant: a new binding at version 1, the project version bumped.
select ql_api.role_binding_set_v1(:'p', :'s', 'viewer', true) as res \gset
select is(:'res'::jsonb, '{"status": "set", "projectVersion": 2, "bindingVersion": 1, "role": "viewer", "active": true}',
  'a new binding answers set with binding version 1 and the bumped project version 2');
select is(pg_temp.binding(:'p', :'s'), '(viewer,1,t)', 'the binding is stored: viewer, version 1, active');
select is(pg_temp.pversion(:'p'), 2::bigint, 'the project version moved 1 -> 2');
select is(pg_temp.pversion(:'q'), 1::bigint, 'another project''s version is untouched');
select is(pg_temp.binding(:'q', :'s'), '(viewer,1,t)', 'the subject''s binding in another project is untouched');

-- Role change: binding and project version both +1.
select ql_api.role_binding_set_v1(:'p', :'s', 'operator', true) as res \gset
select is(:'res'::jsonb, '{"status": "set", "projectVersion": 3, "bindingVersion": 2, "role": "operator", "active": true}',
  'a role change bumps the binding version (2) and the project version (3)');
select is(pg_temp.binding(:'p', :'s'), '(operator,2,t)', 'the binding holds the new role at version 2');

-- Admission sees exactly the versions the change answered.
set local role ql_runtime;
select ql_api.request_admission_v1(pg_temp.digest('tok-s'), :'p', 'run.stop', 'POST /x', 'rb.1') as adm \gset
reset role;
select is(jsonb_build_array(:'adm'::jsonb ->> 'decision', :'adm'::jsonb -> 'projectVersion', :'adm'::jsonb -> 'bindingVersion'),
  '["allow", 3, 2]'::jsonb, 'an admission after the change carries the project and binding versions the change answered');

-- Revoke: active = false, both versions bumped; the subject no longer sees the project.
select ql_api.role_binding_set_v1(:'p', :'s', 'operator', false) as res \gset
select is(:'res'::jsonb, '{"status": "set", "projectVersion": 4, "bindingVersion": 3, "role": "operator", "active": false}',
  'a revocation answers set with active false and bumps both versions');
select is(pg_temp.binding(:'p', :'s'), '(operator,3,f)', 'the revoked binding is kept, inactive, at version 3');
select is(ql.policy_fence(:'s', :'p', 'run.stop', 4, 3), '{"status": "fenced", "reason": "binding_revoked"}',
  'the revoked binding fences every later mutation, even at current versions');
set local role ql_runtime;
select ql_api.request_admission_v1(pg_temp.digest('tok-s'), :'p', 'run.read', 'GET /x', 'rb.2') as adm \gset
reset role;
select is(:'adm'::jsonb ->> 'reason', 'project.not_found', 'after revocation the project is not found for the subject');

-- Re-grant: active again, versions still only grow.
select ql_api.role_binding_set_v1(:'p', :'s', 'owner', true) as res \gset
select is(:'res'::jsonb, '{"status": "set", "projectVersion": 5, "bindingVersion": 4, "role": "owner", "active": true}',
  're-granting a revoked binding activates it at the next binding and project versions');

-- Another subject's binding bumps the project version, not S's binding version.
select ql_api.role_binding_set_v1(:'p', :'t', 'admin', true) as res \gset
select is(:'res'::jsonb, '{"status": "set", "projectVersion": 6, "bindingVersion": 1, "role": "admin", "active": true}',
  'a binding of another subject answers its own version 1 and the project version 6');
select is(pg_temp.binding(:'p', :'s'), '(owner,4,t)', 'S''s binding version does not move with T''s change');
select is(ql.policy_fence(:'s', :'p', 'run.stop', 5, 4), '{"status": "fenced", "reason": "project_changed"}',
  'an admission of S taken before T''s change is fenced project_changed');

-- ---------------------------------------------------------------------------------------------
-- invalid: nothing changes (no version moves).
select pg_temp.pstate() as before \gset
select is(ql_api.role_binding_set_v1(null, :'s', 'viewer', true), '{"status": "invalid", "reason": "project_id"}',
  'a NULL project is invalid');
select is(pg_temp.pstate(), :'before', 'NULL project is invalid and nothing changes');
select is(ql_api.role_binding_set_v1(:'p', null, 'viewer', true), '{"status": "invalid", "reason": "subject_id"}',
  'a NULL subject is invalid');
select is(pg_temp.pstate(), :'before', 'NULL subject is invalid and nothing changes');
select is(ql_api.role_binding_set_v1(:'p', :'s', null, true), '{"status": "invalid", "reason": "role"}',
  'a NULL role is invalid');
select is(pg_temp.pstate(), :'before', 'NULL role is invalid and nothing changes');
select is(ql_api.role_binding_set_v1(:'p', :'s', 'superuser', true), '{"status": "invalid", "reason": "role"}',
  'a role outside owner/admin/operator/viewer is invalid');
select is(pg_temp.pstate(), :'before', 'unknown role is invalid and nothing changes');
select is(ql_api.role_binding_set_v1(:'p', :'s', 'Owner', true), '{"status": "invalid", "reason": "role"}',
  'roles are exact: Owner is invalid');
select is(pg_temp.pstate(), :'before', 'upper-case role is invalid and nothing changes');
select is(ql_api.role_binding_set_v1(:'p', :'s', 'viewer', null), '{"status": "invalid", "reason": "active"}',
  'a NULL active flag is invalid');
select is(pg_temp.pstate(), :'before', 'NULL active is invalid and nothing changes');

-- not_found: a missing project, a missing subject.
select is(ql_api.role_binding_set_v1(gen_random_uuid(), :'s', 'viewer', true), '{"status": "not_found", "reason": "project"}',
  'a missing project is not_found project');
select is(pg_temp.pstate(), :'before', 'a missing project is not_found and nothing changes');
select is(ql_api.role_binding_set_v1(:'p', gen_random_uuid(), 'viewer', true), '{"status": "not_found", "reason": "subject"}',
  'a missing subject is not_found subject');
select is(pg_temp.binding(:'p', :'s') || ' ' || (select count(*) from ql.role_bindings b where b.project_id = :'p'),
  '(owner,4,t) 2', 'a missing subject writes no binding');
select is(pg_temp.pversion(:'p'), 6::bigint, 'a missing subject leaves the project version alone');
select ok(pg_temp.pstate() = :'before', 'a missing subject is not_found and nothing changes');

select * from finish();
rollback;
