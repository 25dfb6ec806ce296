-- Tests ql_api.project_workers_v1: a Project sees exactly the Workers of the pools its tasks use, each with its
-- name, pool, generation, status, online, last contact and the Project's own active Attempts (never an id or a
-- fingerprint, never another Project's work); it reads only.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(9);

select is_definer('ql_api', 'project_workers_v1', array['uuid'], 'project_workers_v1 is SECURITY DEFINER');
select function_privs_are('ql_api', 'project_workers_v1', array['uuid'], 'ql_runtime', array['EXECUTE'],
  'the runtime role (the shell) may call it');

-- A Project whose task runs in pool pw-home, with a running Attempt on a Worker of that pool.
select pg_temp.mk_project('pw-jobs') as p \gset
select pg_temp.mk_run(pg_temp.mk_revision(:'p', '{"argv": ["true"], "pool": "pw-home"}')) as prun \gset
select pg_temp.mk_worker('pw-home') as busy \gset
update ql.workers set name = 'pw-busy' where id = :'busy';
select pg_temp.offer_at(:'busy', 'running') as offer \gset
select pg_temp.mk_worker('pw-home') as idle \gset
update ql.workers set name = 'pw-idle' where id = :'idle';
select pg_temp.mk_worker('pw-elsewhere') as other \gset
-- Another Project in the same pool, with its own running Attempt on the busy Worker.
select pg_temp.mk_project('pw-other') as q \gset
select pg_temp.mk_run(pg_temp.mk_revision(:'q', '{"argv": ["true"], "pool": "pw-home"}')) as qrun \gset
select ok(pg_temp.pull(:'busy', (:'offer'::jsonb ->> 'sessionId')::uuid, 'token-b') is not null,
  'the busy Worker also holds the other Project''s Attempt');

select pg_temp.state() as before \gset
select ql_api.project_workers_v1(:'p') as seen \gset
select is(jsonb_path_query_array(:'seen'::jsonb, '$.workers[*].name'), '["pw-busy", "pw-idle"]',
  'the Workers of the Project''s pools, by name; a Worker of another pool is not listed');
select is(array(select jsonb_object_keys(:'seen'::jsonb -> 'workers' -> 0) order by 1),
  array['activeAttempts', 'generation', 'lastContactAtMs', 'name', 'online', 'pool', 'status'],
  'each answers exactly name, pool, generation, status, online, lastContactAtMs, activeAttempts (no id)');
select is((:'seen'::jsonb -> 'workers' -> 0) - 'lastContactAtMs', '{"name": "pw-busy", "pool": "pw-home",
  "generation": 1, "status": "active", "online": true, "activeAttempts": 1}', 'the busy Worker is online, with this Project''s one Attempt (not the other Project''s)');
select is(:'seen'::jsonb -> 'workers' -> 1, '{"name": "pw-idle", "pool": "pw-home", "generation": 1,
  "status": "active", "online": false, "lastContactAtMs": null, "activeAttempts": 0}', 'the idle one never connected');
select is(pg_temp.state(), :'before', 'listing changes nothing');
select is(ql_api.project_workers_v1(null), '{"status": "invalid", "reason": "project_id"}', 'a null id is invalid');

select * from finish();
rollback;
