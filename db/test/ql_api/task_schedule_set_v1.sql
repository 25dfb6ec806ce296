-- Tests ql_api.task_schedule_set_v1: a task's schedule is set (next fire time from now), set again unchanged, changed
-- (a new expression or zone moves the cursor, a new overlap policy alone keeps it) and cleared; every bad argument
-- (expression, zone, overlap, project, name) is invalid and a missing task or Project is not_found, and none of them
-- changes anything; only an operator (the owner, as a DBA) may call it. A change or a clear made while a fire time of
-- the old schedule is due (between the fire time and the next scheduler pass) first handles that fire time under the
-- old schedule, exactly once, as the scheduler would have: it is never dropped.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(77);

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


-- ---------------------------------------------------------------------------------------------
-- 8. A change never drops a fire time that was due under the old schedule. Each task below has a minutely schedule
-- whose cursor is the start of the current minute (due, not yet handled by a scheduler pass); then it is changed.
create function pg_temp.due_minutely(p_project uuid, p_name text, p_overlap text) returns bigint language plpgsql as $$
declare
  v_due bigint := (ql.now_ms() / 60000) * 60000;
begin
  perform ql_api.task_schedule_set_v1(p_project, p_name, '* * * * *', 'UTC', p_overlap);
  update ql.task_schedules s set next_fire_at_ms = v_due
   where s.task_id = (select t.id from ql.tasks t where t.project_id = p_project and t.name = p_name);
  return v_due;
end $$;
-- A task's fire rows as text: (fire time, outcome, whether a Run is named), oldest first.
create function pg_temp.fires_of(p_task uuid) returns text language sql
return (select string_agg((f.fire_at_ms, f.outcome, f.run_id is not null)::text, ' ' order by f.fire_at_ms)
          from ql.schedule_fires f where f.task_id = p_task);

-- a. A new expression: the due fire time is enqueued (a Run as the scheduler queues one), then the cursor moves on
--    under the new expression, from now.
select ql_api.task_create_v1(:'p', 'changed', '{"argv": ["true"]}') ->> 'taskId' as task_c \gset
select pg_temp.due_minutely(:'p', 'changed', 'skip') as due_c \gset
select ql_api.task_schedule_set_v1(:'p', 'changed', '0 3 * * *', 'UTC', 'skip') as r_c \gset
select is(:'r_c'::jsonb ->> 'status', 'set', 'a new expression while a fire time is due is set');
select is(pg_temp.fires_of(:'task_c'), format('(%s,enqueued,t)', :'due_c'),
  'the fire time that was due under the old expression is enqueued once, not dropped');
select results_eq(format($$select r.status::text, e.actor_kind::text, (e.payload ->> 'scheduledFireAtMs')::bigint
                             from ql.schedule_fires f join ql.runs r on r.id = f.run_id
                             join ql.run_events e on e.run_id = r.id and e.sequence = 1
                            where f.task_id = %L$$, :'task_c'),
  format($$values ('queued'::text, 'system'::text, %s::bigint)$$, :'due_c'),
  'its Run is queued by the system with that fire time, exactly as a scheduler pass would have queued it');
select is((:'r_c'::jsonb ->> 'nextFireAtMs')::bigint, pg_temp.next_ms('0 3 * * *', 'UTC', ql.now_ms()),
  'the new expression''s next fire time is the first after now');
set local role ql_scheduler;
select ql_api.schedule_fire_v1(128) as page_c \gset
reset role;
select is(pg_temp.fires_of(:'task_c'), format('(%s,enqueued,t)', :'due_c'),
  'the next scheduler pass finds nothing more of that task to fire: exactly once');

-- b. Clearing: the due fire time is enqueued, then the schedule is gone.
select ql_api.task_create_v1(:'p', 'cleared', '{"argv": ["true"]}') ->> 'taskId' as task_x \gset
select pg_temp.due_minutely(:'p', 'cleared', 'skip') as due_x \gset
select is(ql_api.task_schedule_set_v1(:'p', 'cleared', null, null, null) ->> 'status', 'cleared',
  'a clear while a fire time is due is cleared');
select is(pg_temp.fires_of(:'task_x'), format('(%s,enqueued,t)', :'due_x'), 'and the due fire time was enqueued first');
select is((select count(*)::int from ql.task_schedules s where s.task_id = :'task_x'), 0, 'the schedule is gone');

-- c. A new overlap policy alone: the due fire time is handled under the policy in force when it came (allow: a Run
--    although one is live), and the cursor moves past now under the same expression.
select ql_api.task_create_v1(:'p', 'policy', '{"argv": ["true"]}') ->> 'taskId' as task_o \gset
select pg_temp.due_minutely(:'p', 'policy', 'allow') as due_o \gset
select pg_temp.mk_run((select t.current_revision_id from ql.tasks t where t.id = :'task_o')) as live_o \gset
select ql_api.task_schedule_set_v1(:'p', 'policy', '* * * * *', 'UTC', 'skip') as r_o \gset
select is(pg_temp.fires_of(:'task_o'), format('(%s,enqueued,t)', :'due_o'),
  'the due fire time is enqueued under the old policy (allow), although a Run of the task is live');
select is((:'r_o'::jsonb ->> 'nextFireAtMs')::bigint,
  (select case when pg_temp.next_ms('* * * * *', 'UTC', f.fire_at_ms) > f.decided_at_ms
               then pg_temp.next_ms('* * * * *', 'UTC', f.fire_at_ms)
               else pg_temp.next_ms('* * * * *', 'UTC', f.decided_at_ms) end
     from ql.schedule_fires f where f.task_id = :'task_o'),
  'the cursor moved past the handled fire time as the scheduler moves it (the next one, or the first after now)');
select is(pg_temp.row_of(:'task_o'), '* * * * * UTC skip', 'and the new policy is stored');

-- d. The due fire time is skipped as the scheduler would skip it: the task is disabled (skipped_inactive).
select ql_api.task_create_v1(:'p', 'disabled', '{"argv": ["true"]}') ->> 'taskId' as task_d \gset
select pg_temp.due_minutely(:'p', 'disabled', 'skip') as due_d \gset
update ql.tasks set status = 'disabled' where id = :'task_d';
select is(ql_api.task_schedule_set_v1(:'p', 'disabled', '*/5 * * * *', 'UTC', 'skip') ->> 'status', 'set',
  'a disabled task''s schedule changed while a fire time is due is set');
select is(pg_temp.fires_of(:'task_d'), format('(%s,skipped_inactive,f)', :'due_d'),
  'the due fire time is recorded skipped_inactive, as the scheduler records it, and queues nothing');

-- e. Long overdue (no scheduler pass for an hour): the one due fire time is handled, the ones missed since fold in.
select ql_api.task_create_v1(:'p', 'overdue', '{"argv": ["true"]}') ->> 'taskId' as task_l \gset
select pg_temp.due_minutely(:'p', 'overdue', 'skip') - 3600000 as due_l \gset
update ql.task_schedules set next_fire_at_ms = :'due_l' where task_id = :'task_l';
select is(ql_api.task_schedule_set_v1(:'p', 'overdue', '0 3 * * *', 'UTC', 'skip') ->> 'status', 'set',
  'a change an hour after the due fire time is set');
select results_eq(format($$select f.fire_at_ms::bigint, f.outcome, f.caught_up from ql.schedule_fires f where f.task_id = %L$$,
                         :'task_l'),
  format($$values (%s::bigint, 'enqueued'::text, true)$$, :'due_l'),
  'the due fire time is enqueued once, the later missed ones folded into it (caught_up), as the scheduler folds them');

-- f. Unchanged, or nothing due: nothing is handled by the call (the scheduler's pass does it).
select ql_api.task_create_v1(:'p', 'same', '{"argv": ["true"]}') ->> 'taskId' as task_u \gset
select pg_temp.due_minutely(:'p', 'same', 'skip') as due_u \gset
select pg_temp.sstate() as before \gset
select is(ql_api.task_schedule_set_v1(:'p', 'same', '* * * * *', 'UTC', 'skip') ->> 'status', 'unchanged',
  'the same definition while a fire time is due is unchanged');
select is(pg_temp.sstate(), :'before', 'an unchanged call handles nothing and writes nothing: the fire time stays due');

select * from finish();
rollback;
