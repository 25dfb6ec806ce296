-- Tests ql_api.task_schedule_set_v1: a task's schedule is set (next fire time from now), set again unchanged, changed
-- (a new expression or zone moves the cursor, a new overlap policy alone keeps it) and cleared; every bad argument
-- (expression, zone, overlap, project, name) is invalid and a missing task or Project is not_found, and none of them
-- changes anything; only an operator (the owner, as a DBA) may call it.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(60);

-- Everything a schedule call could touch: Runs and events, projects, tasks, revisions, schedules, fire rows.
create function pg_temp.sstate() returns text language sql
return concat_ws(E'\n', pg_temp.state(),
  (select string_agg('project ' || p::text, E'\n' order by p.id) from ql.projects p),
  (select string_agg('task ' || t::text, E'\n' order by t.id) from ql.tasks t),
  (select string_agg('revision ' || r::text, E'\n' order by r.id) from ql.task_execution_revisions r),
  (select string_agg('schedule ' || s::text, E'\n' order by s.task_id) from ql.task_schedules s),
  (select string_agg('fire ' || f::text, E'\n' order by f.task_id, f.fire_at_ms) from ql.schedule_fires f));

-- A refused call: its answer, and whether everything stored is exactly what it was before.
create function pg_temp.refused(p_project uuid, p_name text, p_cron text, p_tz text, p_overlap text default 'skip')
returns text language plpgsql as $$
declare
  v_before text := pg_temp.sstate();
  v_result jsonb := ql_api.task_schedule_set_v1(p_project, p_name, p_cron, p_tz, p_overlap);
begin
  return (v_result - 'detail')::text || case when pg_temp.sstate() is not distinct from v_before
                                             then ' and nothing changed' else ' but the state changed' end;
end $$;

-- The first fire time of an expression after a database time in ms, in ms.
create function pg_temp.next_ms(p_cron text, p_tz text, p_after_ms bigint) returns bigint language sql
return (extract(epoch from ql.cron_next((ql.cron_parse(p_cron)).spec, p_tz, to_timestamp(p_after_ms / 1000.0))) * 1000)::bigint;

create function pg_temp.row_of(p_task uuid) returns text language sql
return (select concat_ws(' ', s.cron, s.timezone, s.overlap) from ql.task_schedules s where s.task_id = p_task);

-- ---------------------------------------------------------------------------------------------
-- Structure: an operator's command, SECURITY DEFINER, executable by its owner only.
select has_function('ql_api', 'task_schedule_set_v1', array['uuid', 'text', 'text', 'text', 'text'],
  'task_schedule_set_v1(project, name, cron, timezone, overlap) exists');
select is_definer('ql_api', 'task_schedule_set_v1', array['uuid', 'text', 'text', 'text', 'text'], 'it is SECURITY DEFINER');
select is((select p.proconfig from pg_proc p where p.oid = 'ql_api.task_schedule_set_v1(uuid, text, text, text, text)'::regprocedure),
  array['search_path=pg_catalog, pg_temp'], 'it pins search_path to pg_catalog, pg_temp');
select is(pg_get_function_arguments('ql_api.task_schedule_set_v1(uuid, text, text, text, text)'::regprocedure),
  'p_project_id uuid, p_name text, p_cron text, p_timezone text, p_overlap text DEFAULT ''skip''::text',
  'overlap defaults to skip');
select function_privs_are('ql_api', 'task_schedule_set_v1', array['uuid', 'text', 'text', 'text', 'text'], 'ql_runtime',
  array[]::text[], 'the runtime role (the shell) may not set schedules');
select function_privs_are('ql_api', 'task_schedule_set_v1', array['uuid', 'text', 'text', 'text', 'text'], 'ql_scheduler',
  array[]::text[], 'the scheduler role may not set schedules');
select function_privs_are('ql_api', 'task_schedule_set_v1', array['uuid', 'text', 'text', 'text', 'text'], 'public',
  array[]::text[], 'PUBLIC may not set schedules');
set local role ql_runtime;
select throws_ok($$select ql_api.task_schedule_set_v1(gen_random_uuid(), 'x', '* * * * *', 'UTC', 'skip')$$, '42501',
  'permission denied for function task_schedule_set_v1', 'the runtime role calling it is refused');
reset role;

-- ---------------------------------------------------------------------------------------------
-- 1. set
select pg_temp.mk_project('ts-p') as p, pg_temp.mk_project('ts-q') as q, pg_temp.mk_project('ts-archived') as a \gset
update ql.projects set status = 'archived' where id = :'a';
select ql_api.task_create_v1(:'p', 'backup', '{"argv": ["true"]}') ->> 'taskId' as task \gset
select ql_api.task_create_v1(:'q', 'only-in-q', '{"argv": ["true"]}') ->> 'taskId' as q_task \gset

select ql.now_ms() as t0 \gset
select ql_api.task_schedule_set_v1(:'p', 'backup', '*/5 * * * *', 'Europe/Berlin', 'skip') as r1 \gset
select ql.now_ms() as t1 \gset
select is(:'r1'::jsonb - 'nextFireAtMs', jsonb_build_object('status', 'set', 'taskId', :'task'::uuid, 'cron', '*/5 * * * *',
  'timezone', 'Europe/Berlin', 'overlap', 'skip'), 'a new schedule is set');
select results_eq(format($$select project_id, cron, timezone, overlap, next_fire_at_ms::bigint, created_at_ms = updated_at_ms
                           from ql.task_schedules where task_id = %L$$, :'task'),
  format($$values (%L::uuid, '*/5 * * * *'::text, 'Europe/Berlin'::text, 'skip'::text, %s::bigint, true)$$,
         :'p', :'r1'::jsonb ->> 'nextFireAtMs'),
  'it is stored as given, with the cursor it answered');
select is((:'r1'::jsonb ->> 'nextFireAtMs')::bigint,
  pg_temp.next_ms('*/5 * * * *', 'Europe/Berlin', (select s.created_at_ms from ql.task_schedules s where s.task_id = :'task')),
  'the next fire time is the first after now (the call''s database time)');
select ok((:'r1'::jsonb ->> 'nextFireAtMs')::bigint > :'t0'::bigint
          and (:'r1'::jsonb ->> 'nextFireAtMs')::bigint <= :'t1'::bigint + 300000
          and (:'r1'::jsonb ->> 'nextFireAtMs')::bigint % 300000 = 0,
  'a */5 schedule next fires within five minutes, on a multiple of five minutes');
select is((select count(*)::int from ql.schedule_fires f where f.task_id = :'task'), 0, 'setting a schedule fires nothing');

-- 2. unchanged: the same definition again (surrounding blanks are trimmed) writes nothing.
select pg_temp.sstate() as before \gset
select is(ql_api.task_schedule_set_v1(:'p', 'backup', E' */5 * * * *\t', 'Europe/Berlin', 'skip'), :'r1'::jsonb || '{"status": "unchanged"}',
  'the same schedule again is unchanged, with the stored cursor');
select is(pg_temp.sstate(), :'before', 'and nothing changed');

-- 3. The overlap policy alone keeps the cursor; a new expression or zone moves it.
select ql_api.task_schedule_set_v1(:'p', 'backup', '*/5 * * * *', 'Europe/Berlin', 'allow') as r2 \gset
select is(:'r2'::jsonb, :'r1'::jsonb || '{"status": "set", "overlap": "allow"}', 'a new overlap policy is set');
select is((select s.next_fire_at_ms::bigint from ql.task_schedules s where s.task_id = :'task'), (:'r1'::jsonb ->> 'nextFireAtMs')::bigint,
  'and the cursor stays: a fire time due meanwhile is not lost');
select ok((select s.updated_at_ms > s.created_at_ms or s.updated_at_ms = s.created_at_ms from ql.task_schedules s where s.task_id = :'task')
          and pg_temp.row_of(:'task') = '*/5 * * * * Europe/Berlin allow', 'the row holds the new policy');

select ql_api.task_schedule_set_v1(:'p', 'backup', '0 9 * * *', 'Europe/Berlin', 'allow') as r3 \gset
select is((:'r3'::jsonb ->> 'nextFireAtMs')::bigint,
  pg_temp.next_ms('0 9 * * *', 'Europe/Berlin', (select s.updated_at_ms from ql.task_schedules s where s.task_id = :'task')),
  'a new expression: the next fire time is computed again, from now');
select ql_api.task_schedule_set_v1(:'p', 'backup', '0 9 * * *', 'America/New_York', 'allow') as r4 \gset
select is((:'r4'::jsonb ->> 'nextFireAtMs')::bigint,
  pg_temp.next_ms('0 9 * * *', 'America/New_York', (select s.updated_at_ms from ql.task_schedules s where s.task_id = :'task')),
  'a new zone: computed again, 09:00 on New York''s clock');
select is(ql.local_iso(to_timestamp((:'r4'::jsonb ->> 'nextFireAtMs')::bigint / 1000.0), 'America/New_York') ~ 'T09:00:00-0[45]:00$',
  true, 'which is 09:00 local time in New York');
select is((select count(*)::int from ql.task_schedules), 1, 'still one schedule for the task');

-- 4. clear
select ql_api.task_schedule_set_v1(:'p', 'backup', null, null, null) as c1 \gset
select is(:'c1'::jsonb, jsonb_build_object('status', 'cleared', 'taskId', :'task'::uuid), 'a NULL expression clears the schedule');
select is((select count(*)::int from ql.task_schedules s where s.task_id = :'task'), 0, 'the schedule row is gone');
select pg_temp.sstate() as before \gset
select is(ql_api.task_schedule_set_v1(:'p', 'backup', null, 'not/a zone', 'bogus'),
  jsonb_build_object('status', 'unchanged', 'taskId', :'task'::uuid),
  'clearing a task without a schedule is unchanged (the zone and policy are not read when clearing)');
select is(pg_temp.sstate(), :'before', 'and nothing changed');
select is(ql_api.task_schedule_set_v1(:'p', 'backup', '@daily', 'UTC') ->> 'overlap', 'skip',
  'set again, without an overlap argument: skip');
select is(pg_temp.row_of(:'task'), '@daily UTC skip', 'a macro is stored as written');

-- ---------------------------------------------------------------------------------------------
-- 5. invalid: nothing changes (the schedule set just above stays).
select is(pg_temp.refused(null, 'backup', '* * * * *', 'UTC'), '{"reason": "project_id", "status": "invalid"} and nothing changed',
  'a NULL project is invalid');
select is(pg_temp.refused(:'p', null, '* * * * *', 'UTC'), '{"reason": "name", "status": "invalid"} and nothing changed',
  'a NULL name is invalid');
select is(pg_temp.refused(:'p', 'two words', '* * * * *', 'UTC'), '{"reason": "name", "status": "invalid"} and nothing changed',
  'a name with a space is invalid');
select is(pg_temp.refused(:'p', 'backup', '61 * * * *', 'UTC'), '{"reason": "cron", "status": "invalid"} and nothing changed',
  'minute 61 is invalid cron');
select is(ql_api.task_schedule_set_v1(:'p', 'backup', '61 * * * *', 'UTC'),
  '{"status": "invalid", "reason": "cron", "detail": "minute: 61 is out of range 0-59"}'::jsonb,
  'the refusal says which field and why');
select is(pg_temp.refused(:'p', 'backup', '* * * *', 'UTC'), '{"reason": "cron", "status": "invalid"} and nothing changed',
  'four fields are invalid cron');
select is(pg_temp.refused(:'p', 'backup', '', 'UTC'), '{"reason": "cron", "status": "invalid"} and nothing changed',
  'an empty expression is invalid cron (NULL clears, an empty string does not)');
select is(pg_temp.refused(:'p', 'backup', '@reboot', 'UTC'), '{"reason": "cron", "status": "invalid"} and nothing changed',
  '@reboot is invalid cron');
select is(pg_temp.refused(:'p', 'backup', '0 0 30 2 *', 'UTC'), '{"reason": "cron_never_fires", "status": "invalid"} and nothing changed',
  'February 30 is cron_never_fires');
select is(pg_temp.refused(:'p', 'backup', '* * * * *', null), '{"reason": "timezone", "status": "invalid"} and nothing changed',
  'a NULL zone is invalid');
select is(pg_temp.refused(:'p', 'backup', '* * * * *', 'Mars/Olympus_Mons'), '{"reason": "timezone", "status": "invalid"} and nothing changed',
  'an unknown zone is invalid');
select is(pg_temp.refused(:'p', 'backup', '* * * * *', 'europe/berlin'), '{"reason": "timezone", "status": "invalid"} and nothing changed',
  'a zone name in the wrong case is invalid (names are stored exactly as tzdata spells them)');
select is(pg_temp.refused(:'p', 'backup', '* * * * *', 'UTC+3'), '{"reason": "timezone", "status": "invalid"} and nothing changed',
  'a POSIX zone specification (which PostgreSQL would accept) is not an IANA name: invalid');
select is(pg_temp.refused(:'p', 'backup', '* * * * *', 'CET-1CEST'), '{"reason": "timezone", "status": "invalid"} and nothing changed',
  'a POSIX rule string is invalid');
select is(pg_temp.refused(:'p', 'backup', '* * * * *', 'posix/Europe/Berlin'), '{"reason": "timezone", "status": "invalid"} and nothing changed',
  'the posix/ copy of a zone is invalid');
select is(pg_temp.refused(:'p', 'backup', '* * * * *', 'Factory'), '{"reason": "timezone", "status": "invalid"} and nothing changed',
  'Factory is invalid');
select is(pg_temp.refused(:'p', 'backup', '* * * * *', ''), '{"reason": "timezone", "status": "invalid"} and nothing changed',
  'an empty zone is invalid');
select is(pg_temp.refused(:'p', 'backup', '* * * * *', 'UTC', null), '{"reason": "overlap", "status": "invalid"} and nothing changed',
  'a NULL overlap policy is invalid');
select is(pg_temp.refused(:'p', 'backup', '* * * * *', 'UTC', 'SKIP'), '{"reason": "overlap", "status": "invalid"} and nothing changed',
  'SKIP (upper case) is invalid');
select is(pg_temp.refused(:'p', 'backup', '* * * * *', 'UTC', 'queue'), '{"reason": "overlap", "status": "invalid"} and nothing changed',
  'an unknown overlap policy is invalid');
select is(pg_temp.refused(gen_random_uuid(), 'backup', '61 * * * *', 'UTC'), '{"reason": "cron", "status": "invalid"} and nothing changed',
  'arguments are checked before the Project is looked up');

-- 6. not_found: nothing changes.
select is(pg_temp.refused(gen_random_uuid(), 'backup', '* * * * *', 'UTC'), '{"reason": "project", "status": "not_found"} and nothing changed',
  'a missing Project is not_found project');
select is(pg_temp.refused(:'a', 'backup', '* * * * *', 'UTC'), '{"reason": "project", "status": "not_found"} and nothing changed',
  'an archived Project is not_found project');
select is(pg_temp.refused(:'p', 'nightly', '* * * * *', 'UTC'), '{"reason": "task", "status": "not_found"} and nothing changed',
  'a task name the Project lacks is not_found task');
select is(pg_temp.refused(:'p', 'only-in-q', '* * * * *', 'UTC'), '{"reason": "task", "status": "not_found"} and nothing changed',
  'another Project''s task is not_found task');
select is(pg_temp.refused(:'p', 'nightly', null, null, null), '{"reason": "task", "status": "not_found"} and nothing changed',
  'clearing a missing task is not_found task');
select is(pg_temp.refused(:'a', 'backup', null, null, null), '{"reason": "project", "status": "not_found"} and nothing changed',
  'clearing in an archived Project is not_found project');
select is(pg_temp.row_of(:'task'), '@daily UTC skip', 'after every refusal the schedule is still the one set last');

-- ---------------------------------------------------------------------------------------------
-- 7. Clearing keeps the record of what was fired; setting again starts from now.
select pg_temp.mk_revision(:'p') as rev_f \gset
select r.task_id as task_f, t.name as name_f from ql.task_execution_revisions r join ql.tasks t on t.id = r.task_id
 where r.id = :'rev_f' \gset
select ql_api.task_schedule_set_v1(:'p', :'name_f', '* * * * *', 'UTC', 'allow') ->> 'status' as s \gset
update ql.task_schedules set next_fire_at_ms = next_fire_at_ms - 120000 where task_id = :'task_f';
set local role ql_scheduler;
select ql_api.schedule_fire_v1(128) ->> 'enqueued' as fired \gset
reset role;
select is(:'fired'::text, '1', 'a due schedule fires once');
select is(ql_api.task_schedule_set_v1(:'p', :'name_f', null, null, null) ->> 'status', 'cleared', 'then it is cleared');
select is((select count(*)::int from ql.schedule_fires f where f.task_id = :'task_f'), 1, 'its fire row stays');
select ok((ql_api.task_schedule_set_v1(:'p', :'name_f', '* * * * *', 'UTC', 'allow') ->> 'nextFireAtMs')::bigint > ql.now_ms(),
  'set again, its next fire time is after now: nothing handled before can come round again');

select * from finish();
rollback;
