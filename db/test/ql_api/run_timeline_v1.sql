-- Tests ql_api.run_timeline_v1: found answers the Run's exact projection and its events in sequence order (the
-- payload as the stored jsonb's canonical text), truncated only beyond 256 events; another Project's Run and a
-- missing Run are the same not_found; invalid arguments; it writes nothing; only the runtime role may call it.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(46);

-- The timeline of a Run as the shell reads it (as ql_runtime; the caller resets the role after).
create function pg_temp.timeline(p_project uuid, p_run uuid) returns jsonb language sql
return ql_api.run_timeline_v1(p_project, p_run);

-- The Run's projection, as documented, built from its stored row.
create function pg_temp.projection(p_run uuid) returns jsonb language sql
return (select jsonb_build_object(
          'runId', r.id, 'projectId', r.project_id, 'taskId', r.task_id, 'taskRevisionId', r.task_revision_id,
          'status', r.status, 'version', r.version, 'eventSequence', r.event_sequence,
          'attemptCount', r.attempt_count, 'cancelRequestedAtMs', r.cancel_requested_at_ms,
          'cancelReason', r.cancel_reason, 'createdAtMs', r.created_at_ms, 'endedAtMs', r.ended_at_ms)
          from ql.runs r where r.id = p_run);

-- Append p_count events to a Run (superuser, as the control plane's writers do through ql.run_event).
create function pg_temp.append_events(p_run uuid, p_count int) returns void language plpgsql as $$
begin
  for i in 1..p_count loop
    perform ql.run_event(p_run, null, 'run.noted', 'system', null, null, jsonb_build_object('i', i, 'note', 'bulk'),
                         ql.now_ms(), 'bulk:' || p_run || ':' || i);
  end loop;
end $$;

-- ---------------------------------------------------------------------------------------------
-- Structure: a read of the user API, SECURITY DEFINER, STABLE, executable by the runtime role only.
select has_function('ql_api', 'run_timeline_v1', array['uuid', 'uuid'], 'run_timeline_v1(project, run) exists');
select is_definer('ql_api', 'run_timeline_v1', array['uuid', 'uuid'], 'run_timeline_v1 runs as its owner (SECURITY DEFINER)');
select function_returns('ql_api', 'run_timeline_v1', array['uuid', 'uuid'], 'jsonb',
  'run_timeline_v1 answers a typed jsonb result');
select volatility_is('ql_api', 'run_timeline_v1', array['uuid', 'uuid'], 'stable',
  'run_timeline_v1 is STABLE: one snapshot, no writes');
select is((select p.proconfig from pg_catalog.pg_proc p where p.oid = 'ql_api.run_timeline_v1(uuid, uuid)'::regprocedure),
  array['search_path=pg_catalog, pg_temp'], 'run_timeline_v1 pins search_path to pg_catalog, pg_temp');
select function_privs_are('ql_api', 'run_timeline_v1', array['uuid', 'uuid'], 'ql_runtime', array['EXECUTE'],
  'the runtime role (the shell) may read a timeline');
select function_privs_are('ql_api', 'run_timeline_v1', array['uuid', 'uuid'], 'ql_scheduler', array[]::text[],
  'the scheduler role may not read a timeline');
select function_privs_are('ql_api', 'run_timeline_v1', array['uuid', 'uuid'], 'public', array[]::text[],
  'PUBLIC may not read a timeline');

-- ---------------------------------------------------------------------------------------------
-- Setup. Project P: Run R1 held by a Worker up to running; Run R2 cancelled by a user; Run R3 created with no
-- event yet; Runs R256 (exactly 256 events) and R300 (300 events). Project Q: Run RQ.
select pg_temp.mk_project('tl-p') as p, pg_temp.mk_project('tl-q') as q \gset
select pg_temp.mk_revision(:'p', '{"argv": ["true"], "pool": "tl-pool"}') as rev \gset
select pg_temp.mk_run(:'rev') as r1 \gset
select pg_temp.mk_worker('tl-pool') as w \gset
set local role ql_runtime;
select pg_temp.offer_at(:'w', 'running') as o \gset
reset role;

select pg_temp.mk_run(pg_temp.mk_revision(:'p')) as r2 \gset
select ql.now_ms() as cancel_at \gset
update ql.runs set cancel_requested_at_ms = :cancel_at, cancel_reason = 'user' where id = :'r2';
select ql.run_event(:'r2', 'cancelled', 'run.cancelled', 'user', null, null,
  '{"reason": "user", "note": {"z": 1, "a": [1, 2.50, "x"]}, "b": null}', :cancel_at, 'run.cancelled:' || :'r2') \gset

insert into ql.runs (project_id, task_id, task_revision_id, pool, status, created_at_ms)
select t.project_id, t.task_id, t.id, 'default', 'created', ql.now_ms() from ql.task_execution_revisions t
 where t.id = :'rev'
returning id as r3 \gset

select pg_temp.mk_run(:'rev') as r256 \gset
select pg_temp.append_events(:'r256', 255);
select pg_temp.mk_run(:'rev') as r300 \gset
select pg_temp.append_events(:'r300', 299);

select pg_temp.mk_run(pg_temp.mk_revision(:'q')) as rq \gset

select pg_temp.state() as before \gset

-- ---------------------------------------------------------------------------------------------
-- 1. found: the Run held to running.
set local role ql_runtime;
select pg_temp.timeline(:'p', :'r1') as tl \gset
reset role;

select is(array(select k from jsonb_object_keys(:'tl'::jsonb) k order by k), array['events', 'run', 'status', 'truncated'],
  'found answers exactly status, run, events and truncated');
select is(:'tl'::jsonb ->> 'status', 'found', 'a Run of the Project is found');
select is(array(select k from jsonb_object_keys(:'tl'::jsonb -> 'run') k order by k),
  array['attemptCount', 'cancelReason', 'cancelRequestedAtMs', 'createdAtMs', 'endedAtMs', 'eventSequence', 'projectId',
        'runId', 'status', 'taskId', 'taskRevisionId', 'version'],
  'the run projection has exactly the documented keys');
select is(:'tl'::jsonb -> 'run', pg_temp.projection(:'r1'), 'the run projection equals the stored Run, field by field');
select is(:'tl'::jsonb -> 'run',
  (select jsonb_build_object('runId', :'r1'::uuid, 'projectId', :'p'::uuid, 'taskId', t.task_id,
     'taskRevisionId', :'rev'::uuid, 'status', 'running', 'version', 3, 'eventSequence', 2, 'attemptCount', 1,
     'cancelRequestedAtMs', null, 'cancelReason', null, 'createdAtMs', r.created_at_ms, 'endedAtMs', null)
     from ql.task_execution_revisions t, ql.runs r where t.id = :'rev' and r.id = :'r1'),
  'the running Run: its ids, status running, version 3 after 2 events (queued, starting), one attempt, no cancel intent, not ended');
select is(jsonb_typeof(:'tl'::jsonb -> 'run' -> 'cancelRequestedAtMs') || ' ' || jsonb_typeof(:'tl'::jsonb -> 'run' -> 'endedAtMs'),
  'null null', 'absent times are JSON null, not missing keys');
select is(:'tl'::jsonb -> 'truncated', 'false'::jsonb, 'a Run of a handful of events is not truncated');

select is((select count(*)::int from jsonb_array_elements(:'tl'::jsonb -> 'events') e
            where array(select k from jsonb_object_keys(e) k order by k)
                  = array['actorKind', 'attemptId', 'occurredAtMs', 'payload', 'sequence', 'type']), 2,
  'each of the 2 events has exactly sequence, type, actorKind, attemptId, occurredAtMs and payload');
select results_eq(
  format($$select x.n::bigint, (x.e ->> 'sequence')::bigint, x.e ->> 'type', x.e ->> 'actorKind',
                  (x.e ->> 'attemptId')::uuid, (x.e ->> 'occurredAtMs')::bigint, x.e ->> 'payload'
             from jsonb_array_elements(%L::jsonb -> 'events') with ordinality x(e, n) order by x.n$$, :'tl'),
  format($$select e.sequence, e.sequence, e.type, e.actor_kind::text, e.attempt_id, e.occurred_at_ms::bigint,
                  e.payload::text
             from ql.run_events e where e.run_id = %L order by e.sequence$$, :'r1'),
  'the events come in sequence order, each with its stored type, actor, attempt, time and payload text');
select is(array(select e ->> 'type' from jsonb_array_elements(:'tl'::jsonb -> 'events') e),
  (select array_agg(e.type order by e.sequence) from ql.run_events e where e.run_id = :'r1'),
  'the event types read in the order they happened');
select is(array(select jsonb_typeof(e -> 'payload') from jsonb_array_elements(:'tl'::jsonb -> 'events') e),
  array['string', 'string'], 'every payload is a JSON string (canonical text), not an object');
select is((:'tl'::jsonb -> 'events' -> 1 ->> 'attemptId')::uuid, (:'o'::jsonb ->> 'attemptId')::uuid,
  'the claim event names the Attempt that was offered');
select is(:'tl'::jsonb -> 'events' -> 0 -> 'attemptId', 'null'::jsonb, 'the queued event names no Attempt (JSON null)');

-- ---------------------------------------------------------------------------------------------
-- 2. found: a cancelled Run (cancel intent, end time, payload canonical text).
set local role ql_runtime;
select pg_temp.timeline(:'p', :'r2') as tl2 \gset
reset role;
select is(:'tl2'::jsonb -> 'run', pg_temp.projection(:'r2'), 'the cancelled Run''s projection equals its stored row');
select is(jsonb_build_array(:'tl2'::jsonb -> 'run' ->> 'status', :'tl2'::jsonb -> 'run' -> 'cancelRequestedAtMs',
                            :'tl2'::jsonb -> 'run' ->> 'cancelReason', :'tl2'::jsonb -> 'run' -> 'endedAtMs'),
  jsonb_build_array('cancelled', :cancel_at, 'user', :cancel_at),
  'the cancelled Run shows status cancelled, its cancel intent time and reason user, and its end time');
select is(:'tl2'::jsonb -> 'events' -> 1 ->> 'payload',
  (select e.payload::text from ql.run_events e where e.run_id = :'r2' and e.sequence = 2),
  'the payload text equals the stored jsonb::text');
select is(:'tl2'::jsonb -> 'events' -> 1 ->> 'payload', '{"b": null, "note": {"a": [1, 2.50, "x"], "z": 1}, "reason": "user"}',
  'the payload is canonical jsonb text: keys ordered, nulls and numbers kept as stored');
select is(array[:'tl2'::jsonb -> 'events' -> 1 ->> 'type', :'tl2'::jsonb -> 'events' -> 1 ->> 'actorKind'],
  array['run.cancelled', 'user'], 'the cancel event carries its type and actor kind');

-- ---------------------------------------------------------------------------------------------
-- 3. found: a Run with no event yet answers an empty array.
set local role ql_runtime;
select pg_temp.timeline(:'p', :'r3') as tl3 \gset
reset role;
select is(:'tl3'::jsonb -> 'events', '[]'::jsonb, 'a Run without events answers events [] (not null)');
select is(array[:'tl3'::jsonb -> 'run' ->> 'status', :'tl3'::jsonb -> 'run' ->> 'eventSequence',
                :'tl3'::jsonb ->> 'truncated'], array['created', '0', 'false'],
  'the eventless Run is created at event sequence 0, not truncated');

-- ---------------------------------------------------------------------------------------------
-- 4. Exactly 256 events: all of them, not truncated. 300 events: the first 256, truncated.
set local role ql_runtime;
select pg_temp.timeline(:'p', :'r256') as tl256 \gset
select pg_temp.timeline(:'p', :'r300') as tl300 \gset
reset role;
select is(array[jsonb_array_length(:'tl256'::jsonb -> 'events')::text, :'tl256'::jsonb -> 'run' ->> 'eventSequence',
                :'tl256'::jsonb ->> 'truncated'], array['256', '256', 'false'],
  'a Run of exactly 256 events answers all 256, not truncated');
select is(array[jsonb_array_length(:'tl300'::jsonb -> 'events')::text, :'tl300'::jsonb -> 'run' ->> 'eventSequence',
                :'tl300'::jsonb -> 'run' ->> 'version', :'tl300'::jsonb ->> 'truncated'],
  array['256', '300', '301', 'true'],
  'a Run of 300 events answers 256 of them and truncated true; the projection still counts 300');
select is(array(select (e ->> 'sequence')::int from jsonb_array_elements(:'tl300'::jsonb -> 'events') e),
  array(select generate_series(1, 256)),
  'the truncated timeline holds the FIRST 256 events, sequences 1..256 in order');
select results_eq(
  format($$select (x.e ->> 'sequence')::bigint, x.e ->> 'payload'
             from jsonb_array_elements(%L::jsonb -> 'events') x(e) order by 1$$, :'tl300'),
  format($$select e.sequence, e.payload::text from ql.run_events e where e.run_id = %L and e.sequence <= 256
            order by 1$$, :'r300'),
  'each of the 256 events carries its own stored payload text');

-- ---------------------------------------------------------------------------------------------
-- 5. not_found: another Project's Run and a missing Run are the same answer.
set local role ql_runtime;
select pg_temp.timeline(:'p', :'rq') as other \gset
select pg_temp.timeline(:'p', gen_random_uuid()) as missing \gset
select pg_temp.timeline(:'q', :'rq') ->> 'status' as rq_own \gset
select pg_temp.timeline(gen_random_uuid(), :'r1') as no_project \gset
reset role;
select is(:'other'::jsonb, '{"status": "not_found", "reason": "run"}', 'another Project''s Run is not_found run');
select is(:'missing'::jsonb, '{"status": "not_found", "reason": "run"}', 'a missing Run is not_found run');
select is(:'other'::text, :'missing'::text, 'another Project''s Run and a missing Run give byte-for-byte the same answer');
select is(:'rq_own'::text, 'found', 'the other Project''s Run exists and is found in its own Project');
select is(:'no_project'::jsonb, '{"status": "not_found", "reason": "run"}',
  'a Run asked for under a missing Project is the same not_found');

-- ---------------------------------------------------------------------------------------------
-- 6. invalid arguments.
set local role ql_runtime;
select is(pg_temp.timeline(null, :'r1'), '{"status": "invalid", "reason": "project_id"}', 'a NULL project is invalid');
select is(pg_temp.timeline(:'p', null), '{"status": "invalid", "reason": "run_id"}', 'a NULL run is invalid');
select is(pg_temp.timeline(null, null), '{"status": "invalid", "reason": "project_id"}',
  'with both NULL the project is reported first');
reset role;

-- ---------------------------------------------------------------------------------------------
-- 7. A read writes nothing, and only the runtime role may call it.
select is(pg_temp.state(), :'before', 'every read above (found, not_found, invalid) changed nothing');
set local role ql_scheduler;
select throws_ok(format($$select ql_api.run_timeline_v1(%L, %L)$$, :'p', :'r1'), '42501',
  'permission denied for function run_timeline_v1', 'the scheduler role reading a timeline is refused: 42501');
reset role;
set local role ql_readonly;
select throws_ok(format($$select ql_api.run_timeline_v1(%L, %L)$$, :'p', :'r1'), '42501',
  'permission denied for schema ql_api', 'the read-only DBA role reading a timeline is refused: 42501');
reset role;
set local role ql_runtime;
select is(pg_temp.timeline(:'p', :'r1'), :'tl'::jsonb, 'reading the same Run again answers the same timeline');
reset role;

-- A new event is visible to the next read (nothing is cached between reads).
select pg_temp.append_events(:'r1', 1);
set local role ql_runtime;
select pg_temp.timeline(:'p', :'r1') as tl_after \gset
reset role;
select is(array[jsonb_array_length(:'tl_after'::jsonb -> 'events')::text, :'tl_after'::jsonb -> 'run' ->> 'version',
                :'tl_after'::jsonb -> 'events' -> 2 ->> 'type'], array['3', '4', 'run.noted'],
  'an event appended later is the next element, and the projection''s version moves with it');
select is(:'tl_after'::jsonb -> 'events' -> 2 ->> 'payload', '{"i": 1, "note": "bulk"}',
  'the appended event''s payload reads back as its canonical text');

select * from finish();
rollback;
