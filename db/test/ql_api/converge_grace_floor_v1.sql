-- Tests ql_api.converge_grace_floor_v1: the smallest grace ql_api.converge accepts is the Workers' stop grace
-- (ql.settings.worker_stop_grace_ms) + 1000 ms (the runner's once-a-second lease poll), read by the scheduler role
-- through this SECURITY DEFINER function (it has no access to schema ql).
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(9);

select is_definer('ql_api', 'converge_grace_floor_v1', array[]::text[],
  'converge_grace_floor_v1 runs as its owner: the scheduler cannot read ql.settings itself');
select is((select p.proconfig from pg_catalog.pg_proc p where p.oid = 'ql_api.converge_grace_floor_v1()'::regprocedure),
  array['search_path=pg_catalog, pg_temp'], 'converge_grace_floor_v1 pins search_path to pg_catalog, pg_temp');
select volatility_is('ql_api', 'converge_grace_floor_v1', array[]::text[], 'stable', 'stable: it reads one setting');
select function_privs_are('ql_api', 'converge_grace_floor_v1', array[]::text[], 'ql_scheduler', array['EXECUTE'],
  'the scheduler role (pg_cron running ql_api.converge) may read the floor');
select function_privs_are('ql_api', 'converge_grace_floor_v1', array[]::text[], 'ql_runtime', array[]::text[],
  'the runtime role (the shell) may not');
select function_privs_are('ql_api', 'converge_grace_floor_v1', array[]::text[], 'public', array[]::text[],
  'PUBLIC may not');

set local role ql_scheduler;
select is(ql_api.converge_grace_floor_v1(), 6000::bigint,
  'by default the floor is 6000 ms: the Worker''s default stop grace (5 s) + the runner''s 1 s poll');
reset role;
update ql.settings set worker_stop_grace_ms = 0;
set local role ql_scheduler;
select is(ql_api.converge_grace_floor_v1(), 1000::bigint, 'Workers that KILL at once still leave the 1 s poll');
reset role;
update ql.settings set worker_stop_grace_ms = 3600000;
set local role ql_scheduler;
select is(ql_api.converge_grace_floor_v1(), 3601000::bigint, 'the longest stop grace a Worker accepts: 3601000 ms');
reset role;

select * from finish();
rollback;
