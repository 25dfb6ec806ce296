-- Tests ql_api.project_list_v1: every Project by name with status, version and task count; it reads only, and only
-- an operator (the owner) may call it.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(8);

select is_definer('ql_api', 'project_list_v1', array[]::text[], 'project_list_v1 is SECURITY DEFINER');
select function_privs_are('ql_api', 'project_list_v1', array[]::text[], 'ql_runtime', array[]::text[],
  'the runtime role (the shell) may not list Projects');
select function_privs_are('ql_api', 'project_list_v1', array[]::text[], 'ql_scheduler', array[]::text[],
  'the scheduler role may not list Projects');
set local role ql_runtime;
select throws_ok($$select ql_api.project_list_v1()$$, '42501', 'permission denied for function project_list_v1',
  'the runtime role calling project_list_v1 is refused: 42501');
reset role;

select pg_temp.mk_project('pl-b') as b \gset
select pg_temp.mk_project('pl-a') as a \gset
select pg_temp.mk_revision(:'b') as r1, pg_temp.mk_revision(:'b') as r2 \gset
update ql.projects set status = 'archived', version = 3 where id = :'a';

select pg_temp.pstate() as before \gset
select ql_api.project_list_v1() as listed \gset
select is(jsonb_path_query_array(:'listed'::jsonb, '$.projects[*] ? (@.name starts with "pl-").name'), '["pl-a", "pl-b"]',
  'Projects are listed by name');
select is((select p - 'createdAtMs' from jsonb_array_elements(:'listed'::jsonb -> 'projects') p where p ->> 'name' = 'pl-a'),
  jsonb_build_object('projectId', :'a'::uuid, 'name', 'pl-a', 'status', 'archived', 'version', 3, 'tasks', 0),
  'a Project answers its id, name, status, version and task count');
select is((select (p ->> 'tasks')::int from jsonb_array_elements(:'listed'::jsonb -> 'projects') p where p ->> 'name' = 'pl-b'),
  2, 'a Project''s tasks are counted (its own only)');
select is(pg_temp.pstate(), :'before', 'listing changes nothing');

select * from finish();
rollback;
