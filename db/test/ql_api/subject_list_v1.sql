-- Tests ql_api.subject_list_v1: every subject by name with kind, status and its active roles, never a token digest;
-- it reads only, and only an operator (the owner) may call it.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(9);

select is_definer('ql_api', 'subject_list_v1', array[]::text[], 'subject_list_v1 is SECURITY DEFINER');
select function_privs_are('ql_api', 'subject_list_v1', array[]::text[], 'ql_runtime', array[]::text[],
  'the runtime role (the shell) may not list subjects');
select function_privs_are('ql_api', 'subject_list_v1', array[]::text[], 'ql_scheduler', array[]::text[],
  'the scheduler role may not list subjects');
set local role ql_runtime;
select throws_ok($$select ql_api.subject_list_v1()$$, '42501', 'permission denied for function subject_list_v1',
  'the runtime role calling subject_list_v1 is refused: 42501');
reset role;

select pg_temp.mk_project('sl-p1') as p1 \gset
select pg_temp.mk_project('sl-p2') as p2 \gset
select pg_temp.mk_subject('sl-ann') as ann \gset
select pg_temp.mk_subject('sl-bot', 'agent', 'disabled') as bot \gset
insert into ql.role_bindings (project_id, subject_id, role) values (:'p2', :'ann', 'viewer'), (:'p1', :'ann', 'owner');
insert into ql.role_bindings (project_id, subject_id, role, active) values (:'p1', :'bot', 'operator', false);

select pg_temp.pstate() as before \gset
select ql_api.subject_list_v1() as listed \gset
create function pg_temp.row_of(p_id uuid) returns jsonb language sql
return (select s - 'createdAtMs' from jsonb_array_elements(:'listed'::jsonb -> 'subjects') s where s ->> 'subjectId' = p_id::text);
select is(pg_temp.row_of(:'ann'), jsonb_build_object('subjectId', :'ann'::uuid, 'kind', 'user', 'name', 'sl-ann',
  'status', 'active', 'roles', jsonb_build_array(
    jsonb_build_object('projectId', :'p1'::uuid, 'project', 'sl-p1', 'role', 'owner'),
    jsonb_build_object('projectId', :'p2'::uuid, 'project', 'sl-p2', 'role', 'viewer'))),
  'a subject answers id, kind, name, status and its active roles by project name');
select is(pg_temp.row_of(:'bot'), jsonb_build_object('subjectId', :'bot'::uuid, 'kind', 'agent', 'name', 'sl-bot',
  'status', 'disabled', 'roles', '[]'::jsonb), 'a disabled agent is listed; a revoked binding is not');
select ok(position(encode(sha256(convert_to('tok-sl-ann', 'UTF8')), 'hex') in :'listed') = 0
          and position(encode(sha256(convert_to('tok-sl-ann', 'UTF8')), 'base64') in :'listed') = 0,
  'no token digest is listed');
select ok((select bool_and(s ->> 'name' <= n ->> 'name') from jsonb_array_elements(:'listed'::jsonb -> 'subjects')
           with ordinality a(s, i) join jsonb_array_elements(:'listed'::jsonb -> 'subjects') with ordinality b(n, j)
           on j = i + 1), 'subjects are listed by name');
select is(pg_temp.pstate(), :'before', 'listing changes nothing');

select * from finish();
rollback;
