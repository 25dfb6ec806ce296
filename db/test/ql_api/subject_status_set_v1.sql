-- Tests ql_api.subject_status_set_v1: disabling a subject (by id or name) denies its admissions; enabling admits it
-- again; refusals (unknown, ambiguous, null, the system subject) change nothing; only an operator may call it.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(16);

select is_definer('ql_api', 'subject_status_set_v1', array['text', 'boolean'], 'subject_status_set_v1 is SECURITY DEFINER');
select function_privs_are('ql_api', 'subject_status_set_v1', array['text', 'boolean'], 'ql_runtime', array[]::text[],
  'the runtime role (the shell) may not disable a subject');
select function_privs_are('ql_api', 'subject_status_set_v1', array['text', 'boolean'], 'ql_scheduler', array[]::text[],
  'the scheduler role may not disable a subject');
set local role ql_runtime;
select throws_ok($$select ql_api.subject_status_set_v1('ss-ann', false)$$, '42501',
  'permission denied for function subject_status_set_v1', 'the runtime role calling it is refused: 42501');
reset role;

select pg_temp.mk_subject('ss-ann') as ann \gset
-- Names are unique (ql/unique_names): the one ambiguity left is a name that is another subject's id.
select pg_temp.mk_subject('ss-twin') as twin1 \gset
insert into ql.subjects (kind, name) values ('user', :'twin1');
insert into ql.subjects (kind, name) values ('system', 'ss-system') returning id as sys \gset

select pg_temp.pstate() as before \gset
select is(ql_api.subject_status_set_v1(null, false), '{"status": "invalid", "reason": "name"}', 'a NULL subject is invalid');
select is(ql_api.subject_status_set_v1('ss-ann', null), '{"status": "invalid", "reason": "active"}', 'a NULL status is invalid');
select is(ql_api.subject_status_set_v1('ss-nobody', false), '{"status": "not_found", "reason": "subject"}',
  'an unknown name is not found');
select is(ql_api.subject_status_set_v1(:'sys', false), '{"status": "not_found", "reason": "subject"}',
  'the system subject is not found (an operator cannot disable the control plane)');
select is(ql_api.subject_status_set_v1(:'twin1', false),
  jsonb_build_object('status', 'invalid', 'reason', 'name', 'detail', format('2 subjects match %L: name one by its id', :'twin1')),
  'a subject''s id that is another subject''s name is refused');
select is(pg_temp.pstate(), :'before', 'the refused calls change nothing');

select is(ql_api.subject_status_set_v1('ss-ann', false), jsonb_build_object('status', 'disabled', 'subjectId', :'ann'::uuid,
  'name', 'ss-ann', 'changed', true), 'disabling by name answers disabled');
select is(ql_api.request_admission_v1(sha256(convert_to('tok-ss-ann', 'UTF8')), pg_temp.mk_project(), 'run.read',
  'GET /v1/projects/{projectId}/runs', 'ss.1') ->> 'reason', 'auth.subject_disabled', 'a disabled subject is denied at admission');
select pg_temp.pstate() as before \gset
select is(ql_api.subject_status_set_v1(:'ann', false) ->> 'changed', 'false', 'disabling again answers changed false');
select is(pg_temp.pstate(), :'before', 'and changes nothing');
select is(ql_api.subject_status_set_v1(:'ann', true) ->> 'status', 'enabled', 'enabling by id answers enabled');
select is((select status from ql.subjects where id = :'ann'), 'active', 'the subject is active again');

select * from finish();
rollback;
