-- Tests ql_api.subject_admission_v1: an active subject's bearer is allowed on a route that names no Project and
-- audited without a Project or permission; an unknown token and a disabled subject are denied as
-- request_admission_v1 denies them, with nothing written; invalid arguments write nothing.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(10);

select is_definer('ql_api', 'subject_admission_v1', array['bytea', 'text', 'text'],
  'subject_admission_v1 is SECURITY DEFINER');
select function_privs_are('ql_api', 'subject_admission_v1', array['bytea', 'text', 'text'], 'ql_runtime',
  array['EXECUTE'], 'the runtime role (the shell) may call it');

select pg_temp.mk_subject('sa-alice') as alice \gset
select pg_temp.mk_subject('sa-dora', 'user', 'disabled') as dora \gset

select ql_api.subject_admission_v1(pg_temp.digest('tok-sa-alice'), 'user.projects.list', 'r-sa-1') as allowed \gset
select is(:'allowed'::jsonb - 'auditId', jsonb_build_object('decision', 'allow', 'reason', 'ok', 'subjectId', :'alice',
  'subjectKind', 'user', 'projectVersion', null, 'bindingVersion', null), 'an active subject is allowed');
select is((select row(a.id, a.subject_id, a.route, a.project_id, a.permission, a.decision, a.reason)::text
             from ql.security_audit a where a.request_id = 'r-sa-1'),
  row((:'allowed'::jsonb ->> 'auditId')::uuid, :'alice'::uuid, 'user.projects.list', null::uuid, null::text,
      'allow', 'ok')::text,
  'the allow is audited: no Project, no permission');

select pg_temp.pstate() || (select count(*) from ql.security_audit)::text as before \gset
select is(ql_api.subject_admission_v1(pg_temp.digest('tok-nobody'), 'user.projects.list', 'r-sa-2') ->> 'reason',
  'auth.unknown_token', 'an unknown token is denied');
select is(ql_api.subject_admission_v1(pg_temp.digest('tok-sa-dora'), 'user.projects.list', 'r-sa-3'),
  jsonb_build_object('decision', 'deny', 'reason', 'auth.subject_disabled', 'subjectId', :'dora', 'subjectKind', 'user',
    'projectVersion', null, 'bindingVersion', null, 'auditId', '00000000-0000-0000-0000-000000000000'),
  'a disabled subject is denied, with the nil audit id');
select is(ql_api.subject_admission_v1(pg_temp.digest('tok-sa-dora'), 'user.projects.list', 'r-sa-3') ->> 'reason',
  ql_api.request_admission_v1(pg_temp.digest('tok-sa-dora'), gen_random_uuid(), 'run.read', 'r', 'r-sa-3') ->> 'reason',
  '… as request_admission_v1 denies it');
select is(ql_api.subject_admission_v1('\x00', 'r', 'r-sa-4'), '{"status": "invalid", "reason": "token_digest"}',
  'a digest of another length is invalid');
select is(ql_api.subject_admission_v1(pg_temp.digest('tok-sa-alice'), 'r', 'no spaces'),
  '{"status": "invalid", "reason": "request_id"}', 'a malformed request id is invalid');
select is(pg_temp.pstate() || (select count(*) from ql.security_audit)::text, :'before',
  'denials and invalid calls write nothing');

select * from finish();
rollback;
