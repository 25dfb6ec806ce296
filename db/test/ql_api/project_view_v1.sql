-- Tests ql_api.project_view_v1: an admitted subject's view of a Project answers its role and, for run.read,
-- run.start and run.stop, exactly the decision request_admission_v1 takes (allow, deny, approval_required);
-- a subject without an active binding sees not_found, like admission; it reads only.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(12);

select is_definer('ql_api', 'project_view_v1', array['uuid', 'uuid'], 'project_view_v1 is SECURITY DEFINER');
select function_privs_are('ql_api', 'project_view_v1', array['uuid', 'uuid'], 'ql_runtime', array['EXECUTE'],
  'the runtime role (the shell) may call it');

select pg_temp.mk_project('pv-jobs') as p \gset
select pg_temp.mk_subject('pv-alice') as alice \gset
select pg_temp.mk_subject('pv-val') as val \gset
select pg_temp.mk_subject('pv-bot', 'agent') as bot \gset
select pg_temp.mk_subject('pv-eve') as eve \gset
insert into ql.role_bindings (project_id, subject_id, role) values
  (:'p', :'alice', 'operator'), (:'p', :'val', 'viewer'), (:'p', :'bot', 'operator');
insert into ql.role_bindings (project_id, subject_id, role, active) values (:'p', :'eve', 'owner', false);

-- The decision admission takes, as the view spells it.
create function pg_temp.admitted(p_subject text, p_permission text) returns text language sql
return (select case a ->> 'decision' when 'require_approval' then 'approval_required' else a ->> 'decision' end
          from ql_api.request_admission_v1(pg_temp.digest('tok-' || p_subject), :'p'::uuid, p_permission, 'view-test', 'r-pv') a);

select pg_temp.pstate() as before \gset
select is(ql_api.project_view_v1(:'p', :'alice'), jsonb_build_object('status', 'found', 'projectId', :'p',
  'project', 'pv-jobs', 'projectStatus', 'active', 'subject', 'pv-alice', 'subjectKind', 'user', 'role', 'operator',
  'runRead', 'allow', 'runStart', 'allow', 'runStop', 'allow', 'taskWrite', 'deny'),
  'an operator may read, start and stop, and not write tasks');
select is(ql_api.project_view_v1(:'p', :'val') - 'projectId' - 'project' - 'projectStatus' - 'subject' - 'subjectKind',
  '{"status": "found", "role": "viewer", "runRead": "allow", "runStart": "deny", "runStop": "deny", "taskWrite": "deny"}',
  'a viewer may only read');
select is(ql_api.project_view_v1(:'p', :'bot') ->> 'runStop', 'approval_required', 'an agent''s stop needs approval');
select is(pg_temp.pstate(), :'before', 'viewing changes nothing');

select is(array(select ql_api.project_view_v1(:'p', s.id) ->> k from ql.subjects s,
                  unnest(array['runRead', 'runStart', 'runStop', 'taskWrite']) k where s.name in ('pv-alice', 'pv-val', 'pv-bot')
                 order by s.name, k),
          array(select pg_temp.admitted(s.name, perm) from ql.subjects s,
                  unnest(array['run.read', 'run.start', 'run.stop', 'task.write']) perm where s.name in ('pv-alice', 'pv-val', 'pv-bot')
                 order by s.name, perm),
  'each decision is the one admission takes');

update ql.projects set status = 'archived' where id = :'p';
select is(ql_api.project_view_v1(:'p', :'alice') ->> 'runStart', 'deny', 'an archived Project allows no start');
select is(ql_api.project_view_v1(:'p', :'alice') ->> 'runRead', 'allow', '… but still a read');

select is(ql_api.project_view_v1(:'p', :'eve'), '{"status": "not_found", "reason": "project"}',
  'an inactive binding sees no Project, as admission');
select is(ql_api.project_view_v1(gen_random_uuid(), :'alice'), '{"status": "not_found", "reason": "project"}',
  'a missing Project: not_found');
select is(ql_api.project_view_v1(null, :'alice'), '{"status": "invalid", "reason": "project_id"}',
  'a null project id is invalid');

select * from finish();
rollback;
