-- Tests ql_api.task_schedule_show_v1: an unscheduled task; a schedule's next fire times as the scheduler will handle
-- them (the stored cursor first, then ql.cron_next, each with its local time and offset, across a DST change) and its
-- last handled fire times, newest first; bad arguments are invalid, a missing task or Project not_found; it writes
-- nothing; only an operator may call it.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(21);

create function pg_temp.sstate() returns text language sql
return concat_ws(E'\n', pg_temp.state(),
  (select string_agg('schedule ' || s::text, E'\n' order by s.task_id) from ql.task_schedules s),
  (select string_agg('fire ' || f::text, E'\n' order by f.task_id, f.fire_at_ms) from ql.schedule_fires f));

-- ---------------------------------------------------------------------------------------------
-- Structure.
select has_function('ql_api', 'task_schedule_show_v1', array['uuid', 'text', 'integer'], 'task_schedule_show_v1(project, name, count) exists');
select is_definer('ql_api', 'task_schedule_show_v1', array['uuid', 'text', 'integer'], 'it is SECURITY DEFINER');
select is((select p.proconfig from pg_proc p where p.oid = 'ql_api.task_schedule_show_v1(uuid, text, integer)'::regprocedure),
  array['search_path=pg_catalog, pg_temp'], 'it pins search_path to pg_catalog, pg_temp');
select function_privs_are('ql_api', 'task_schedule_show_v1', array['uuid', 'text', 'integer'], 'ql_runtime', array[]::text[],
  'the runtime role may not call it');
select function_privs_are('ql_api', 'task_schedule_show_v1', array['uuid', 'text', 'integer'], 'ql_scheduler', array[]::text[],
  'the scheduler role may not call it');
select function_privs_are('ql_api', 'task_schedule_show_v1', array['uuid', 'text', 'integer'], 'public', array[]::text[],
  'PUBLIC may not call it');

-- ---------------------------------------------------------------------------------------------
select pg_temp.mk_project('show-p') as p, pg_temp.mk_project('show-a') as a \gset
update ql.projects set status = 'archived' where id = :'a';
select ql_api.task_create_v1(:'p', 'report', '{"argv": ["true"]}') ->> 'taskId' as task \gset
select is(ql_api.task_schedule_show_v1(:'p', 'report'), jsonb_build_object('status', 'unscheduled', 'taskId', :'task'::uuid),
  'a task without a schedule is unscheduled');

-- A schedule whose cursor sits just before Berlin's autumn change; three fire rows handled before it.
select ql_api.task_schedule_set_v1(:'p', 'report', '*/30 * * * *', 'Europe/Berlin', 'skip') ->> 'status' as s \gset
update ql.task_schedules set next_fire_at_ms = 1729987200000 where task_id = :'task';  -- 2024-10-27T00:00:00Z
select pg_temp.mk_run((select t.current_revision_id from ql.tasks t where t.id = :'task')) as run \gset
insert into ql.schedule_fires (task_id, fire_at_ms, project_id, decided_at_ms, outcome, run_id, blocking_run_id, caught_up) values
  (:'task', 1729983600000, :'p', 1729983601000, 'enqueued', :'run', null, false),          -- 2024-10-26T23:00Z
  (:'task', 1729985400000, :'p', 1729985401000, 'skipped_overlap', null, :'run', false),   -- 2024-10-26T23:30Z
  (:'task', 1729980000000, :'p', 1729982200000, 'skipped_inactive', null, null, true);     -- 2024-10-26T22:00Z
select pg_temp.sstate() as before \gset
select ql_api.task_schedule_show_v1(:'p', 'report', 5) as shown \gset
select is(:'shown'::jsonb - 'next' - 'last', jsonb_build_object('status', 'scheduled', 'taskId', :'task'::uuid,
  'cron', '*/30 * * * *', 'timezone', 'Europe/Berlin', 'overlap', 'skip'), 'a scheduled task: its definition');
select is(:'shown'::jsonb -> 'next', '[
  {"atMs": 1729987200000, "local": "2024-10-27T02:00:00+02:00"},
  {"atMs": 1729989000000, "local": "2024-10-27T02:30:00+02:00"},
  {"atMs": 1729990800000, "local": "2024-10-27T02:00:00+01:00"},
  {"atMs": 1729992600000, "local": "2024-10-27T02:30:00+01:00"},
  {"atMs": 1729994400000, "local": "2024-10-27T03:00:00+01:00"}]'::jsonb,
  'the next five fire times: the cursor first, then each next one, in ms and local time (both 2 a.m. hours)');
select is(:'shown'::jsonb -> 'last', jsonb_build_array(
  jsonb_build_object('fireAtMs', 1729985400000, 'local', '2024-10-27T01:30:00+02:00', 'decidedAtMs', 1729985401000,
                     'outcome', 'skipped_overlap', 'runId', null, 'blockingRunId', :'run'::uuid, 'caughtUp', false),
  jsonb_build_object('fireAtMs', 1729983600000, 'local', '2024-10-27T01:00:00+02:00', 'decidedAtMs', 1729983601000,
                     'outcome', 'enqueued', 'runId', :'run'::uuid, 'blockingRunId', null, 'caughtUp', false),
  jsonb_build_object('fireAtMs', 1729980000000, 'local', '2024-10-27T00:00:00+02:00', 'decidedAtMs', 1729982200000,
                     'outcome', 'skipped_inactive', 'runId', null, 'blockingRunId', null, 'caughtUp', true)),
  'the last handled fire times, newest first, with their outcome, Run and blocking Run');
select is(jsonb_array_length(ql_api.task_schedule_show_v1(:'p', 'report', 2) -> 'last'), 2, 'count bounds the last fire times');
select is(jsonb_array_length(ql_api.task_schedule_show_v1(:'p', 'report', 1) -> 'next'), 1, 'and the next ones');
select is(jsonb_array_length(ql_api.task_schedule_show_v1(:'p', 'report') -> 'next'), 5, 'five by default');
select is(jsonb_array_length(ql_api.task_schedule_show_v1(:'p', 'report', 100) -> 'next'), 100, 'up to 100');
select is(pg_temp.sstate(), :'before', 'showing writes nothing');

-- ---------------------------------------------------------------------------------------------
select is(ql_api.task_schedule_show_v1(:'p', 'report', 0), '{"status": "invalid", "reason": "limit"}'::jsonb, 'count 0 is invalid');
select is(ql_api.task_schedule_show_v1(:'p', 'report', 101), '{"status": "invalid", "reason": "limit"}'::jsonb, 'count 101 is invalid');
select is(ql_api.task_schedule_show_v1(null, 'report'), '{"status": "invalid", "reason": "project_id"}'::jsonb, 'a NULL project is invalid');
select is(ql_api.task_schedule_show_v1(:'p', 'a b'), '{"status": "invalid", "reason": "name"}'::jsonb, 'a bad name is invalid');
select is(ql_api.task_schedule_show_v1(:'a', 'report'), '{"status": "not_found", "reason": "project"}'::jsonb,
  'an archived Project is not_found');
select is(ql_api.task_schedule_show_v1(:'p', 'nightly'), '{"status": "not_found", "reason": "task"}'::jsonb, 'a missing task is not_found');

select * from finish();
rollback;
