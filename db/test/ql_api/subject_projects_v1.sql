-- Tests ql_api.subject_projects_v1: a subject lists exactly the Projects whose admission allows it run.read (an
-- active binding; an archived Project still reads), and by an id prefix the Runs of those Projects only, by id, at
-- most 10 and whether there are more; a disabled subject lists nothing; a bad prefix is invalid; it reads only.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(12);

select is_definer('ql_api', 'subject_projects_v1', array['uuid', 'text'], 'subject_projects_v1 is SECURITY DEFINER');
select function_privs_are('ql_api', 'subject_projects_v1', array['uuid', 'text'], 'ql_runtime', array['EXECUTE'],
  'the runtime role (the shell) may call it');

select pg_temp.mk_project('sp-b-jobs') as p \gset
select pg_temp.mk_project('sp-a-old') as old \gset
select pg_temp.mk_project('sp-c-other') as other \gset
select pg_temp.mk_project('sp-d-revoked') as revoked \gset
select pg_temp.mk_subject('sp-alice') as alice \gset
insert into ql.role_bindings (project_id, subject_id, role) values (:'p', :'alice', 'viewer'), (:'old', :'alice', 'owner');
insert into ql.role_bindings (project_id, subject_id, role, active) values (:'revoked', :'alice', 'owner', false);
update ql.projects set status = 'archived' where id = :'old';

-- Runs with chosen ids: three share the prefix 5e1ec7ed, one of them in a Project alice cannot read.
create function pg_temp.run_as(p_revision uuid, p_id uuid) returns uuid language sql
begin atomic
  insert into ql.runs (id, project_id, task_id, task_revision_id, pool, status, queued_at_ms, created_at_ms)
  select p_id, t.project_id, t.task_id, t.id, 'default', 'queued', ql.now_ms(), ql.now_ms()
    from ql.task_execution_revisions t where t.id = p_revision
  returning id;
end;
select pg_temp.mk_revision(:'p') as rev \gset
select pg_temp.mk_revision(:'other') as other_rev \gset
select pg_temp.run_as(:'rev', '5e1ec7ed-0000-4000-8000-000000000002') as r2 \gset
select pg_temp.run_as(:'rev', '5e1ec7ed-0000-4000-8000-000000000001') as r1 \gset
select pg_temp.run_as(:'other_rev', '5e1ec7ed-0000-4000-8000-000000000003') as r3 \gset
select pg_temp.run_as(:'rev', '5e1ec7ee-0000-4000-8000-000000000001') as beside \gset
select count(pg_temp.run_as(:'rev', ('5e1ec7ef-0000-4000-8000-0000000001' || lpad(n::text, 2, '0'))::uuid))
  from generate_series(0, 10) n \gset

select pg_temp.pstate() as before \gset
select is(ql_api.subject_projects_v1(:'alice', null),
  jsonb_build_object('status', 'listed', 'projects', jsonb_build_array(
      jsonb_build_object('projectId', :'old', 'project', 'sp-a-old', 'projectStatus', 'archived', 'role', 'owner'),
      jsonb_build_object('projectId', :'p', 'project', 'sp-b-jobs', 'projectStatus', 'active', 'role', 'viewer')),
    'runs', '[]'::jsonb, 'moreRuns', false),
  'the Projects admission lets it read, by name (an archived one too; not a revoked or unbound one); no Runs asked');
select is(array(select r ->> 'runId' from jsonb_array_elements(ql_api.subject_projects_v1(:'alice', '5e1ec7ed') -> 'runs') r),
  array[:'r1', :'r2'], 'a prefix finds the readable Project''s Runs, by id, and none of another Project');
select is(ql_api.subject_projects_v1(:'alice', '5e1ec7ed00004000800000000000000') -> 'runs' -> 0,
  jsonb_build_object('runId', :'r1', 'projectId', :'p', 'project', 'sp-b-jobs', 'taskName', (select name from ql.tasks where project_id = :'p'), 'status', 'queued'),
  'a longer prefix narrows it to one, named with its Project');
select is(ql_api.subject_projects_v1(:'alice', replace(:'beside', '-', '')) -> 'runs' -> 0 ->> 'runId', :'beside',
  'all 32 digits find the one Run');
select is(ql_api.subject_projects_v1(:'alice', 'abcdef01') - 'projects',
  '{"status": "listed", "runs": [], "moreRuns": false}', 'no Run has that prefix');

select is(jsonb_array_length(ql_api.subject_projects_v1(:'alice', '5e1ec7ef') -> 'runs'), 10, 'at most 10 Runs …');
select is(ql_api.subject_projects_v1(:'alice', '5e1ec7ef') -> 'moreRuns', 'true', '… and that there are more');

update ql.subjects set status = 'disabled' where id = :'alice';
select is(ql_api.subject_projects_v1(:'alice', '5e1ec7ed') - 'status',
  '{"projects": [], "runs": [], "moreRuns": false}', 'a disabled subject lists nothing');
update ql.subjects set status = 'active' where id = :'alice';

select is(array[ql_api.subject_projects_v1(:'alice', '5E1EC7ED'), ql_api.subject_projects_v1(:'alice', '5e1ec7e'),
                ql_api.subject_projects_v1(:'alice', '5e1ec7ed-0000'), ql_api.subject_projects_v1(null, null)],
  array['{"status": "invalid", "reason": "run_id"}', '{"status": "invalid", "reason": "run_id"}',
        '{"status": "invalid", "reason": "run_id"}', '{"status": "invalid", "reason": "subject_id"}']::jsonb[],
  'a prefix not of 8 to 32 lower-case hex digits, or no subject, is invalid');
select is(pg_temp.pstate(), :'before', 'listing changes nothing');

select * from finish();
rollback;
