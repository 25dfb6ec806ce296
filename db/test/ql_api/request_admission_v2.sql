-- Tests ql_api.request_admission_v2: a project named by its id or its unique name is admitted exactly as v1 admits
-- its id, and an allow names the project's id; an unknown name is indistinguishable from a project without a
-- binding (project.not_found, audited with the nil uuid); invalid arguments write nothing.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(13);

select is_definer('ql_api', 'request_admission_v2', array['bytea', 'text', 'text', 'text', 'text'],
  'request_admission_v2 is SECURITY DEFINER');
select function_privs_are('ql_api', 'request_admission_v2', array['bytea', 'text', 'text', 'text', 'text'],
  'ql_runtime', array['EXECUTE'], 'the runtime role (the shell) may call it');

select pg_temp.mk_project('adm2-jobs') as p \gset
select pg_temp.mk_project('adm2-other') as other \gset
select pg_temp.mk_subject('adm2-alice') as alice \gset
insert into ql.role_bindings (project_id, subject_id, role) values (:'p', :'alice', 'operator');

create function pg_temp.admit2(p_project text, p_request text, p_permission text default 'run.read')
returns jsonb language sql
return ql_api.request_admission_v2(sha256(convert_to('tok-adm2-alice', 'UTF8')), p_project, p_permission,
                                   'GET /api/v3/projects/{project}/tasks', p_request);

select pg_temp.admit2('adm2-jobs', 'r-name') as by_name \gset
select pg_temp.admit2(:'p', 'r-id') as by_id \gset
select is(:'by_name'::jsonb ->> 'decision', 'allow', 'a project named by its name is admitted');
select is(:'by_name'::jsonb ->> 'projectId', :'p', 'the allow names the project''s id');
select is(:'by_name'::jsonb - 'auditId', :'by_id'::jsonb - 'auditId', 'by name and by id answer alike');
select is((select count(*)::int from ql.security_audit where request_id in ('r-name', 'r-id') and project_id = :'p'), 2,
  'both are audited against the project''s id');
select is(pg_temp.admit2(upper(:'p'), 'r-upper') ->> 'projectId', :'p', 'an id in capitals is the same id');

select pg_temp.admit2('adm2-other', 'r-other') as other_answer \gset
select pg_temp.admit2('adm2-nowhere', 'r-nowhere') as nowhere \gset
select is(:'nowhere'::jsonb - 'auditId', :'other_answer'::jsonb - 'auditId',
  'an unknown name answers exactly as a project without a binding');
select is(:'nowhere'::jsonb ->> 'reason', 'project.not_found', '… project.not_found');
select ok(not (:'nowhere'::jsonb ? 'projectId'), 'a deny names no project id');
select is((select project_id from ql.security_audit where request_id = 'r-nowhere'),
  '00000000-0000-0000-0000-000000000000'::uuid, 'the unknown name is audited with the nil uuid');

select pg_temp.pstate() as before \gset
select is(ql_api.request_admission_v2(sha256(convert_to('tok-adm2-alice', 'UTF8')), '', 'run.read', 'r', 'r-empty'),
  '{"status": "invalid", "reason": "project_id"}'::jsonb, 'an empty project is invalid');
select is(pg_temp.pstate() || (select count(*) from ql.security_audit where request_id = 'r-empty')::text,
  :'before' || '0', 'an invalid call writes nothing');

select * from finish();
rollback;
