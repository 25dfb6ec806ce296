-- Tests ql_api.schedule_next_fire_v1: the earliest next fire time of any schedule, NULL with none, read by the scheduler
-- role (ql_api.schedule_tick sleeps until it) through this SECURITY DEFINER function (it has no access to schema ql).
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(8);

select is_definer('ql_api', 'schedule_next_fire_v1', array[]::text[],
  'schedule_next_fire_v1 runs as its owner: the scheduler cannot read ql.task_schedules itself');
select is((select p.proconfig from pg_catalog.pg_proc p where p.oid = 'ql_api.schedule_next_fire_v1()'::regprocedure),
  array['search_path=pg_catalog, pg_temp'], 'schedule_next_fire_v1 pins search_path to pg_catalog, pg_temp');
select function_privs_are('ql_api', 'schedule_next_fire_v1', array[]::text[], 'ql_scheduler', array['EXECUTE'],
  'the scheduler role may call it');
select function_privs_are('ql_api', 'schedule_next_fire_v1', array[]::text[], 'ql_runtime', array[]::text[],
  'the runtime role (the shell) may not');

delete from ql.task_schedules;
set local role ql_scheduler;
select is(ql_api.schedule_next_fire_v1(), null::bigint, 'no schedule: NULL');
reset role;

select (ql_api.project_create_v1('next-fire') ->> 'projectId') as p \gset
select ql_api.task_create_v1(:'p', 'every-second', '{"argv": ["true"]}') is not null as made \gset
select ql_api.task_create_v1(:'p', 'every-minute', '{"argv": ["true"]}') is not null as made \gset
select (ql_api.task_schedule_set_v1(:'p', 'every-second', '* * * * * *', 'UTC') ->> 'nextFireAtMs')::bigint as s1 \gset
select (ql_api.task_schedule_set_v1(:'p', 'every-minute', '* * * * *', 'UTC') ->> 'nextFireAtMs')::bigint as m1 \gset
select ok(:s1 < :m1 or :m1 - :s1 < 1000, 'the every-second schedule fires first (or in the same second)');
set local role ql_scheduler;
select is(ql_api.schedule_next_fire_v1(), least(:s1, :m1), 'the earliest of the two next fire times');
reset role;
select ok(:s1 % 1000 = 0 and :s1 - (extract(epoch from clock_timestamp()) * 1000)::bigint <= 1000,
  'a 6-field schedule''s next fire time is a whole second, at most a second away');

select * from finish();
rollback;
