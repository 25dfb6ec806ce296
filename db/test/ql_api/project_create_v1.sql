-- Tests ql_api.project_create_v1: created, then exists with the same id (idempotent by name), invalid names (also
-- one that reads as a uuid, which could never be addressed by name) change nothing, and no runtime or scheduler role may create a Project (operators call it as a DBA, through the CLI).
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(53);

-- Everything the control plane stores: runs, attempts, …, projects, subjects, tasks, revisions, workers.
create function pg_temp.ostate() returns text language sql
return concat_ws(E'\n', pg_temp.state(),
  (select string_agg('project ' || p::text, E'\n' order by p.id) from ql.projects p),
  (select string_agg('subject ' || s::text, E'\n' order by s.id) from ql.subjects s),
  (select string_agg('task ' || t::text, E'\n' order by t.id) from ql.tasks t),
  (select string_agg('revision ' || r::text, E'\n' order by r.id) from ql.task_execution_revisions r),
  (select string_agg('worker ' || w::text, E'\n' order by w.id) from ql.workers w));

-- ---------------------------------------------------------------------------------------------
-- Structure: an operator's command, SECURITY DEFINER, executable by its owner only.
select has_function('ql_api', 'project_create_v1', array['text'], 'project_create_v1(text) exists');
select is_definer('ql_api', 'project_create_v1', array['text'], 'project_create_v1 runs as its owner (SECURITY DEFINER)');
select function_returns('ql_api', 'project_create_v1', array['text'], 'jsonb',
  'project_create_v1 answers a typed jsonb result');
select is((select p.proconfig from pg_catalog.pg_proc p where p.oid = 'ql_api.project_create_v1(text)'::regprocedure),
  array['search_path=pg_catalog, pg_temp'], 'project_create_v1 pins search_path to pg_catalog, pg_temp');
select is((select pg_catalog.pg_get_userbyid(p.proowner)::text from pg_catalog.pg_proc p
            where p.oid = 'ql_api.project_create_v1(text)'::regprocedure), 'ql_owner',
  'project_create_v1 is owned by ql_owner');
select function_privs_are('ql_api', 'project_create_v1', array['text'], 'ql_owner', array['EXECUTE'],
  'only its owner ql_owner (an operator acting as DBA) may create a Project');
select function_privs_are('ql_api', 'project_create_v1', array['text'], 'ql_runtime', array[]::text[],
  'the runtime role (the shell) may not create a Project');
select function_privs_are('ql_api', 'project_create_v1', array['text'], 'ql_scheduler', array[]::text[],
  'the scheduler role may not create a Project');
select function_privs_are('ql_api', 'project_create_v1', array['text'], 'public', array[]::text[],
  'PUBLIC may not create a Project');

-- A queued Run so the stored state is never empty.
select pg_temp.mk_run(pg_temp.mk_revision(pg_temp.mk_project('pc-seed'))) as seed_run \gset

select pg_temp.ostate() as before \gset
set local role ql_runtime;
select throws_ok($$select ql_api.project_create_v1('pc-from-shell')$$, '42501',
  'permission denied for function project_create_v1', 'the runtime role calling project_create_v1 is refused: 42501');
reset role;
set local role ql_scheduler;
select throws_ok($$select ql_api.project_create_v1('pc-from-cron')$$, '42501',
  'permission denied for function project_create_v1', 'the scheduler role calling project_create_v1 is refused: 42501');
reset role;
select is(pg_temp.ostate(), :'before', 'the refused calls create no Project and change nothing');

-- ---------------------------------------------------------------------------------------------
-- 1. created: a new Project, active, at version 1.
select ql.now_ms() as t0 \gset
select ql_api.project_create_v1('pc-alpha') as created \gset
select ql.now_ms() as t1 \gset
select :'created'::jsonb ->> 'projectId' as alpha \gset

select is(array(select k from jsonb_object_keys(:'created'::jsonb) k order by k), array['projectId', 'status'],
  'created answers exactly status and projectId');
select is(:'created'::jsonb, jsonb_build_object('status', 'created', 'projectId', :'alpha'::uuid),
  'a new name is created');
select results_eq(
  format('select p.name, p.status, p.version from ql.projects p where p.id = %L', :'alpha'),
  $$values ('pc-alpha'::text, 'active'::text, 1::bigint)$$,
  'the created Project is stored under its name, active, at version 1');
select ok((select p.created_at_ms between :t0 and :t1 from ql.projects p where p.id = :'alpha'),
  'the Project is stamped with database time read during the call');
select is((select count(*)::int from ql.projects p where p.name = 'pc-alpha'), 1, 'exactly one Project has the name');

-- 2. exists: the same name again answers the same id and changes nothing (idempotent).
select pg_temp.ostate() as before \gset
select is(ql_api.project_create_v1('pc-alpha'), jsonb_build_object('status', 'exists', 'projectId', :'alpha'::uuid),
  'creating an existing name answers exists with the same id');
select is(pg_temp.ostate(), :'before', 'exists creates nothing and changes nothing (not even the version)');
select is(ql_api.project_create_v1('pc-alpha') ->> 'projectId', :'alpha',
  'a third call still answers the same id');

-- Names are exact: another case is another Project.
select ql_api.project_create_v1('PC-ALPHA') as upper \gset
select is(:'upper'::jsonb ->> 'status', 'created', 'names are case-sensitive: PC-ALPHA is a new Project');
select isnt(:'upper'::jsonb ->> 'projectId', :'alpha'::text, 'PC-ALPHA has an id of its own');

-- An archived Project still owns its name: exists, and it stays archived.
select pg_temp.mk_project('pc-archived') as archived \gset
update ql.projects set status = 'archived' where id = :'archived';
select pg_temp.ostate() as before \gset
select is(ql_api.project_create_v1('pc-archived'), jsonb_build_object('status', 'exists', 'projectId', :'archived'::uuid),
  'an archived Project''s name answers exists with its id');
select is(pg_temp.ostate(), :'before', 'exists does not revive the archived Project: nothing changes');

-- Boundaries of the name: one character, 128 characters, dots, dashes and underscores after the first.
select is(ql_api.project_create_v1('x') ->> 'status', 'created', 'a one-character name is created');
select is(ql_api.project_create_v1('a' || repeat('b', 127)) ->> 'status', 'created', 'a 128-character name is created');
select is(ql_api.project_create_v1('9.a_b-c') ->> 'status', 'created',
  'a name starting with a digit and holding . _ - is created');

-- ---------------------------------------------------------------------------------------------
-- 3. invalid: nothing changes.
select pg_temp.ostate() as before \gset
select is(ql_api.project_create_v1(null), '{"status": "invalid", "reason": "name"}', 'a NULL name is invalid');
select is(pg_temp.ostate(), :'before', 'a NULL name is invalid and nothing changes');
select is(ql_api.project_create_v1(''), '{"status": "invalid", "reason": "name"}', 'an empty name is invalid');
select is(pg_temp.ostate(), :'before', 'an empty name is invalid and nothing changes');
select is(ql_api.project_create_v1('a' || repeat('b', 128)), '{"status": "invalid", "reason": "name"}',
  'a 129-character name is invalid');
select is(pg_temp.ostate(), :'before', 'a 129-character name is invalid and nothing changes');
select is(ql_api.project_create_v1('-leading-dash'), '{"status": "invalid", "reason": "name"}',
  'a name starting with a dash is invalid');
select is(pg_temp.ostate(), :'before', 'a leading dash is invalid and nothing changes');
select is(ql_api.project_create_v1('.hidden'), '{"status": "invalid", "reason": "name"}',
  'a name starting with a dot is invalid');
select is(pg_temp.ostate(), :'before', 'a leading dot is invalid and nothing changes');
select is(ql_api.project_create_v1('two words'), '{"status": "invalid", "reason": "name"}',
  'a name with a space is invalid');
select is(pg_temp.ostate(), :'before', 'a space is invalid and nothing changes');
select is(ql_api.project_create_v1(E'pc-alpha\n'), '{"status": "invalid", "reason": "name"}',
  'a trailing newline is invalid (the anchor does not match before it)');
select is(pg_temp.ostate(), :'before', 'a trailing newline is invalid and nothing changes');
select is(ql_api.project_create_v1('a/b'), '{"status": "invalid", "reason": "name"}', 'a slash is invalid');
select is(pg_temp.ostate(), :'before', 'a slash is invalid and nothing changes');
select is(ql_api.project_create_v1('projét'), '{"status": "invalid", "reason": "name"}',
  'a non-ASCII letter is invalid');
select is(pg_temp.ostate(), :'before', 'a non-ASCII name is invalid and nothing changes');

-- A name that reads as a uuid is refused (ql.project_named and the shell try an id first, so such a Project could never
-- be named): invalid (name), with a detail saying why, also when it is no Project's id.
select is(ql_api.project_create_v1('0b5e6f2a-9c1d-4e3f-8a7b-6c5d4e3f2a1b'),
  '{"status": "invalid", "reason": "name", "detail": "a name that reads as a uuid would be taken for an id"}',
  'a name that is a canonical uuid is invalid, with its detail');
select is(pg_temp.ostate(), :'before', 'a uuid name is invalid and nothing changes');
select is(ql_api.project_create_v1(upper(:'alpha')) ->> 'reason', 'name',
  'an existing Project''s id in capitals is an invalid name, not a new Project');
select is(pg_temp.ostate(), :'before', 'another Project''s id as a name is invalid and nothing changes');
select is(ql_api.project_create_v1('0b5e6f2a9c1d4e3f8a7b6c5d4e3f2a1b') ->> 'reason', 'name',
  'a uuid without hyphens (PostgreSQL reads it as one) is an invalid name');
select is(pg_temp.ostate(), :'before', 'a uuid without hyphens is invalid and nothing changes');
select is(ql_api.project_create_v1('0b5e6f2a-9c1d-4e3f-8a7b-6c5d4e3f2a1') ->> 'status', 'created',
  'one hex digit short of a uuid is a name like any other: created');
select is((ql.project_named('0b5e6f2a-9c1d-4e3f-8a7b-6c5d4e3f2a1')).name, '0b5e6f2a-9c1d-4e3f-8a7b-6c5d4e3f2a1',
  'and it is addressed by its name');

select * from finish();
rollback;
