-- Tests ql_api.schedule_fire_v1, one scheduler page: a due fire time becomes exactly one queued Run (run.queued,
-- actor system, pinned to the task's current revision) and a row of ql.schedule_fires; a second page finds
-- nothing due; fire times missed while nothing ran fold into one Run and the next is computed from now; overlap
-- skip leaves a skipped_overlap row naming the Run that blocked it, allow enqueues anyway; an archived Project or
-- a task without a revision is skipped_inactive; a fire time handled before (a cursor moved back by hand) is a
-- duplicate and queues nothing (the primary key); pages are bounded and take the most overdue first; a stored
-- expression that does not parse raises QLBUG; a refused limit changes nothing. SKIP LOCKED needs a second
-- session: tests/integration/db/test_schedule_races.py holds a schedule's row lock in one and pages in another.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(59);

-- A schedule of the revision's task, its cursor at p_next_ms. Returns the task id.
create function pg_temp.mk_schedule(p_revision uuid, p_cron text, p_next_ms bigint, p_overlap text default 'allow',
                                    p_tz text default 'UTC')
returns uuid language sql
begin atomic
  insert into ql.task_schedules (task_id, project_id, cron, timezone, overlap, next_fire_at_ms, created_at_ms, updated_at_ms)
  select r.task_id, r.project_id, p_cron, p_tz, p_overlap, p_next_ms, ql.now_ms(), ql.now_ms()
    from ql.task_execution_revisions r where r.id = p_revision
  returning task_id;
end;

-- The whole minute p_minutes before now (database time), in ms.
create function pg_temp.minutes_ago(p_minutes integer) returns bigint language sql
return (extract(epoch from date_trunc('minute', clock_timestamp()) - make_interval(mins => p_minutes)) * 1000)::bigint;

-- One page as pg_cron's role.
create function pg_temp.page(p_limit integer default 128) returns jsonb language plpgsql as $$
declare
  v jsonb;
begin
  set local role ql_scheduler;
  v := ql_api.schedule_fire_v1(p_limit);
  reset role;
  return v;
end $$;

create function pg_temp.counts(p_scanned int, p_enqueued int, p_skipped int, p_duplicates int) returns jsonb language sql
return jsonb_build_object('status', 'ok', 'scanned', p_scanned, 'enqueued', p_enqueued, 'skipped', p_skipped,
                          'duplicates', p_duplicates);

-- Everything a page may write: Runs and events (pg_temp.state), schedules and fire rows.
create function pg_temp.sstate() returns text language sql
return concat_ws(E'\n', pg_temp.state(),
  (select string_agg('schedule ' || s::text, E'\n' order by s.task_id) from ql.task_schedules s),
  (select string_agg('fire ' || f::text, E'\n' order by f.task_id, f.fire_at_ms) from ql.schedule_fires f));

-- Park every schedule far in the future, so a page sees only what a step makes due.
create function pg_temp.park() returns void language sql
begin atomic
  update ql.task_schedules set next_fire_at_ms = 4102444800000;  -- 2100-01-01
end;

-- ---------------------------------------------------------------------------------------------
-- Structure: a page function of the scheduler, SECURITY DEFINER, callable by ql_scheduler only.
select has_function('ql_api', 'schedule_fire_v1', array['integer'], 'schedule_fire_v1(limit) exists');
select is_definer('ql_api', 'schedule_fire_v1', array['integer'], 'schedule_fire_v1 is SECURITY DEFINER');
select function_returns('ql_api', 'schedule_fire_v1', array['integer'], 'jsonb', 'it answers jsonb');
select is((select p.proconfig from pg_proc p where p.oid = 'ql_api.schedule_fire_v1(integer)'::regprocedure),
  array['search_path=pg_catalog, pg_temp'], 'it pins search_path to pg_catalog, pg_temp');
select function_privs_are('ql_api', 'schedule_fire_v1', array['integer'], 'ql_scheduler', array['EXECUTE'],
  'the scheduler role (pg_cron, through converge) may execute it');
select function_privs_are('ql_api', 'schedule_fire_v1', array['integer'], 'ql_runtime', array[]::text[],
  'the runtime role (the shell) may not');
select function_privs_are('ql_api', 'schedule_fire_v1', array['integer'], 'public', array[]::text[], 'PUBLIC may not');
set local role ql_runtime;
select throws_ok('select ql_api.schedule_fire_v1(1)', '42501', 'permission denied for function schedule_fire_v1',
  'the runtime role calling the scheduler page is refused');
reset role;

-- ---------------------------------------------------------------------------------------------
-- 1. A refused limit changes nothing, even with a schedule due.
select pg_temp.mk_project('sched-p') as p \gset
select pg_temp.mk_revision(:'p', '{"argv": ["true"], "pool": "sched"}') as rev_a \gset
select pg_temp.mk_schedule(:'rev_a', '* * * * *', pg_temp.minutes_ago(10)) as task_a \gset
select pg_temp.sstate() as before \gset
select is(pg_temp.page(0), '{"status": "invalid", "reason": "limit"}'::jsonb, 'limit 0 is invalid');
select is(pg_temp.page(129), '{"status": "invalid", "reason": "limit"}'::jsonb, 'limit 129 is invalid');
select is(pg_temp.page(null), '{"status": "invalid", "reason": "limit"}'::jsonb, 'a NULL limit is invalid');
select is(pg_temp.sstate(), :'before', 'a refused limit changes nothing');

-- ---------------------------------------------------------------------------------------------
-- 2. Missed fire times: ten minutes of every-minute fire times are due; one Run stands for them all.
select pg_temp.minutes_ago(10) as fire_a1 \gset
select is(pg_temp.page(), pg_temp.counts(1, 1, 0, 0), 'the due schedule is scanned and one Run is enqueued');
select f.run_id as run_a1 from ql.schedule_fires f where f.task_id = :'task_a' \gset
select results_eq(format($$select fire_at_ms::bigint, outcome, blocking_run_id, caught_up from ql.schedule_fires where task_id = %L$$, :'task_a'),
  format($$values (%s::bigint, 'enqueued'::text, null::uuid, true)$$, :'fire_a1'),
  'one fire row: the first missed fire time, enqueued, caught_up (later fire times had passed too)');
select results_eq(format($$select status::text, task_revision_id, pool, attempt_count, cancel_requested_at_ms::bigint from ql.runs where id = %L$$, :'run_a1'),
  format($$values ('queued'::text, %L::uuid, 'sched'::text, 0, null::bigint)$$, :'rev_a'),
  'the Run is queued, pinned to the task''s current revision, in its plan''s pool, like an enqueued one');
select results_eq(format($$select sequence, type, actor_kind::text, actor_id, attempt_id from ql.run_events where run_id = %L$$, :'run_a1'),
  $$values (1::bigint, 'run.queued'::text, 'system'::text, null::uuid, null::uuid)$$,
  'its one event is run.queued by the system (no subject)');
select is((select e.payload from ql.run_events e where e.run_id = :'run_a1'),
  jsonb_build_object('taskId', :'task_a'::uuid, 'taskRevisionId', :'rev_a'::uuid, 'scheduledFireAtMs', :'fire_a1'::bigint,
                     'caughtUp', true),
  'the event names the task, the revision, the fire time it stands for and that it caught up');
select ok(pg_temp.stream_ok(:'run_a1'), 'its stream is contiguous and version = 1 + events');
select ok((select r.queued_at_ms = f.decided_at_ms and r.created_at_ms = f.decided_at_ms
             from ql.runs r join ql.schedule_fires f on f.run_id = r.id where r.id = :'run_a1'),
  'queued and created at the decision''s database time');
select is((select s.next_fire_at_ms::bigint from ql.task_schedules s where s.task_id = :'task_a'),
  (extract(epoch from ql.cron_next((ql.cron_parse('* * * * *')).spec, 'UTC',
    to_timestamp((select f.decided_at_ms from ql.schedule_fires f where f.task_id = :'task_a') / 1000.0))) * 1000)::bigint,
  'the next fire time is computed from now (the decision time), not from the missed ones');
select ok((select s.next_fire_at_ms > ql.now_ms() from ql.task_schedules s where s.task_id = :'task_a'),
  'so the schedule is no longer due');
select is((select count(*)::int from ql.runs r where r.task_id = :'task_a'), 1,
  'ten missed minutes made one Run, not ten');

-- 3. Exactly once: the same fire time is not handled again.
select pg_temp.sstate() as before \gset
select is(pg_temp.page(), pg_temp.counts(0, 0, 0, 0), 'a second page right after finds nothing due');
select is(pg_temp.sstate(), :'before', 'and writes nothing');

-- 4. On time: a due fire time whose successor is still ahead is not caught_up.
select pg_temp.park();
select pg_temp.mk_revision(:'p') as rev_y \gset
select pg_temp.mk_schedule(:'rev_y', '0 0 1 1 *', (extract(epoch from date_trunc('year', clock_timestamp() at time zone 'UTC')
  at time zone 'UTC') * 1000)::bigint) as task_y \gset
select is(pg_temp.page(), pg_temp.counts(1, 1, 0, 0), 'a yearly schedule due since January 1 is enqueued');
select is((select f.caught_up from ql.schedule_fires f where f.task_id = :'task_y'), false,
  'not caught_up: no later fire time had passed');
select is((select s.next_fire_at_ms::bigint from ql.task_schedules s where s.task_id = :'task_y'),
  (extract(epoch from date_trunc('year', clock_timestamp() at time zone 'UTC') + interval '1 year') * 1000)::bigint,
  'its next fire time is January 1 of next year');

-- 5. Overlap allow: a Run of the task is not terminal, and the next fire time enqueues anyway.
select pg_temp.park();
select pg_temp.minutes_ago(1) as fire_a2 \gset
update ql.task_schedules set next_fire_at_ms = :'fire_a2' where task_id = :'task_a';
select is((select status::text from ql.runs where id = :'run_a1'), 'queued', 'the first Run of task A is still queued');
select is(pg_temp.page(), pg_temp.counts(1, 1, 0, 0), 'overlap allow: enqueued although a Run of the task is live');
select is((select count(*)::int from ql.runs r where r.task_id = :'task_a' and r.status = 'queued'), 2,
  'task A now has two queued Runs');
select results_eq(format($$select outcome from ql.schedule_fires where task_id = %L and fire_at_ms = %s$$,
                         :'task_a', :'fire_a2'),
  $$values ('enqueued'::text)$$, 'its fire row: enqueued');

-- 6. Overlap skip: a live Run of the task blocks the fire time; the skip is recorded, nothing is queued.
select pg_temp.park();
select pg_temp.mk_revision(:'p') as rev_b \gset
select r.task_id as task_b from ql.task_execution_revisions r where r.id = :'rev_b' \gset
select pg_temp.mk_run(:'rev_b') as blocker \gset
select pg_temp.minutes_ago(20) - pg_temp.minutes_ago(20) % 300000 as fire_b1 \gset
select pg_temp.mk_schedule(:'rev_b', '*/5 * * * *', :'fire_b1', 'skip');
select is(pg_temp.page(), pg_temp.counts(1, 0, 1, 0), 'overlap skip with a live Run: skipped, nothing enqueued');
select results_eq(format($$select outcome, run_id, blocking_run_id from ql.schedule_fires where task_id = %L$$, :'task_b'),
  format($$values ('skipped_overlap'::text, null::uuid, %L::uuid)$$, :'blocker'),
  'the skip leaves a trace: a skipped_overlap row naming the blocking Run');
select is((select count(*)::int from ql.runs r where r.task_id = :'task_b'), 1, 'task B still has only its blocking Run');
select ok((select s.next_fire_at_ms > ql.now_ms() from ql.task_schedules s where s.task_id = :'task_b'),
  'the skipped fire time is spent: the schedule moved on');
-- The blocking Run ends; the next fire time enqueues.
select ql.run_event(:'blocker', 'cancelled', 'run.cancelled', 'system', null, null, '{}', ql.now_ms(), 'end-' || :'blocker');
update ql.task_schedules set next_fire_at_ms = :'fire_b1'::bigint + 300000 where task_id = :'task_b';
select is(pg_temp.page(), pg_temp.counts(1, 1, 0, 0), 'overlap skip once the Run is terminal: enqueued');
select is((select count(*)::int from ql.runs r where r.task_id = :'task_b' and r.status = 'queued'), 1,
  'task B has one queued Run, from its schedule');
-- Every non-terminal status blocks: retry_wait and lost too.
update ql.runs set status = 'retry_wait', retry_at_ms = ql.now_ms() + 60000
 where task_id = :'task_b' and status = 'queued';
update ql.task_schedules set next_fire_at_ms = :'fire_b1'::bigint + 600000 where task_id = :'task_b';
select is(pg_temp.page(), pg_temp.counts(1, 0, 1, 0), 'a Run waiting for its retry blocks the next fire time');
update ql.runs set status = 'lost', retry_at_ms = null where task_id = :'task_b' and status = 'retry_wait';
update ql.task_schedules set next_fire_at_ms = :'fire_b1'::bigint + 900000 where task_id = :'task_b';
select is(pg_temp.page(), pg_temp.counts(1, 0, 1, 0), 'a lost Run (not terminal) blocks it too');

-- 7. Inactive: an archived Project, a task without a current revision.
select pg_temp.park();
select pg_temp.mk_project('sched-archived') as q \gset
select pg_temp.mk_revision(:'q') as rev_q \gset
select pg_temp.mk_schedule(:'rev_q', '* * * * *', pg_temp.minutes_ago(2)) as task_q \gset
update ql.projects set status = 'archived' where id = :'q';
insert into ql.tasks (project_id, name) values (:'p', 'no-revision') returning id as task_n \gset
insert into ql.task_schedules (task_id, project_id, cron, timezone, overlap, next_fire_at_ms, created_at_ms, updated_at_ms)
values (:'task_n', :'p', '* * * * *', 'UTC', 'allow', pg_temp.minutes_ago(3), ql.now_ms(), ql.now_ms());
select is(pg_temp.page(), pg_temp.counts(2, 0, 2, 0), 'an archived Project''s and a revision-less task''s fire times are skipped');
select results_eq(format($$select task_id, outcome, run_id, blocking_run_id from ql.schedule_fires
                            where task_id in (%L, %L) order by outcome, task_id$$, :'task_q', :'task_n'),
  format($$select * from (values (%L::uuid, 'skipped_inactive'::text, null::uuid, null::uuid),
                                 (%L::uuid, 'skipped_inactive'::text, null::uuid, null::uuid)) v order by 2, 1$$, :'task_q', :'task_n'),
  'both recorded skipped_inactive');
select is((select count(*)::int from ql.runs r where r.task_id in (:'task_q', :'task_n')), 0, 'and no Run was made');
select ok((select bool_and(s.next_fire_at_ms > ql.now_ms()) from ql.task_schedules s where s.task_id in (:'task_q', :'task_n')),
  'both schedules moved on (an inactive schedule never clogs the page)');

-- 8. A duplicate: the cursor moved back by hand to a fire time already handled queues nothing.
select pg_temp.park();
update ql.task_schedules set next_fire_at_ms = :'fire_a1' where task_id = :'task_a';
select count(*) as runs_before from ql.runs \gset
select string_agg(f::text, ',' order by f.fire_at_ms) as fires_before from ql.schedule_fires f where f.task_id = :'task_a' \gset
select is(pg_temp.page(), pg_temp.counts(1, 0, 0, 1), 'a fire time handled before is a duplicate');
select is((select count(*) from ql.runs), :'runs_before'::bigint, 'no Run was queued for it');
select is((select string_agg(f::text, ',' order by f.fire_at_ms) from ql.schedule_fires f where f.task_id = :'task_a'),
  :'fires_before', 'its fire row is the one written the first time');
select ok((select s.next_fire_at_ms > ql.now_ms() from ql.task_schedules s where s.task_id = :'task_a'),
  'and the schedule moved on');

-- 9. Bounded pages, most overdue first.
select pg_temp.park();
update ql.task_schedules set next_fire_at_ms = pg_temp.minutes_ago(30) where task_id = :'task_a';
update ql.task_schedules set next_fire_at_ms = pg_temp.minutes_ago(20) where task_id = :'task_y';
update ql.task_schedules set next_fire_at_ms = pg_temp.minutes_ago(40) - pg_temp.minutes_ago(40) % 300000 where task_id = :'task_b';
update ql.runs set status = 'failed', ended_at_ms = ql.now_ms() where task_id = :'task_b' and status = 'lost';
select is(pg_temp.page(2), pg_temp.counts(2, 2, 0, 0), 'a page of 2 with 3 due schedules handles 2');
select is((select array_agg(s.task_id order by s.task_id) from ql.task_schedules s where s.next_fire_at_ms <= ql.now_ms()),
  array[:'task_y'::uuid], 'the least overdue one is left for the next page');
select is(pg_temp.page(2), pg_temp.counts(1, 1, 0, 0), 'the next page takes it: a short page');
select is(pg_temp.page(2), pg_temp.counts(0, 0, 0, 0), 'then nothing is due');

-- 10. Every Run the scheduler made has a clean stream; fire rows are append-only.
select is((select count(*)::int from ql.runs r where r.task_id in (:'task_a', :'task_b', :'task_y') and not pg_temp.stream_ok(r.id)), 0,
  'every Run of these tasks has a contiguous stream with version = 1 + events');
select is((select count(*)::int from ql.schedule_fires f where f.outcome = 'enqueued'
            and not exists (select 1 from ql.runs r where r.id = f.run_id and r.task_id = f.task_id)), 0,
  'every enqueued fire row names a Run of its own task');
select throws_ok(format($$update ql.schedule_fires set outcome = 'skipped_overlap' where task_id = %L$$, :'task_a'), 'QLIMM',
  'ql.schedule_fires is immutable: UPDATE refused', 'a fire row cannot be rewritten');
select throws_ok(format($$delete from ql.schedule_fires where task_id = %L$$, :'task_a'), 'QLIMM',
  'ql.schedule_fires is append-only: a fire time within run_retention_days cannot be deleted',
  'a fire row within the retention cannot be deleted');
set constraints all immediate;  -- the deferred foreign keys of the inserts above, checked now
select throws_ok($$truncate ql.schedule_fires$$, 'QLIMM', 'ql.schedule_fires is immutable: TRUNCATE refused',
  'fire rows cannot be truncated');
select throws_ok(format($$insert into ql.schedule_fires (task_id, fire_at_ms, project_id, decided_at_ms, outcome, caught_up)
                          values (%L, 1, %L, 1, 'enqueued', false)$$, :'task_a', :'p'), '23514', null,
  'an enqueued fire row without a Run is refused');
select throws_ok(format($$insert into ql.schedule_fires (task_id, fire_at_ms, project_id, decided_at_ms, outcome, caught_up)
                          values (%L, 1, %L, 1, 'skipped_overlap', false)$$, :'task_a', :'p'), '23514', null,
  'a skipped_overlap fire row without its blocking Run is refused');

-- 11. A stored expression that no longer parses is a bug, loudly.
select pg_temp.park();
update ql.task_schedules set cron = 'bogus', next_fire_at_ms = pg_temp.minutes_ago(1) where task_id = :'task_a';
set local role ql_scheduler;
select throws_ok('select ql_api.schedule_fire_v1(8)', 'QLBUG', null,
  'a stored expression that does not parse raises QLBUG instead of guessing');
reset role;

select * from finish();
rollback;
