-- Tests ql_api.attempt_activation_v1: starting/running/start_failure ACKs, the durable deadline (decision 0000 (ADR-0118 §3)), replays, invalid, not_found and every fence; structure and grants.
begin;
\ir ../fixtures.psql
select plan(162);

-- The exact snapshot of an Attempt as stored (what every answer must carry).
create function pg_temp.snap(p_attempt uuid) returns jsonb language sql
return (select ql.attempt_snapshot(r, a, l) from ql.run_attempts a join ql.runs r on r.id = a.run_id
        join ql.run_leases l on l.attempt_id = a.id where a.id = p_attempt);
-- The (sequence, type) list of a Run's events, for results_eq.
create function pg_temp.event_types(p_run uuid) returns table (sequence bigint, type text) language sql
as $$ select e.sequence, e.type from ql.run_events e where e.run_id = p_run order by e.sequence $$;

-- Structure: one SECURITY DEFINER function, executable by the runtime role and nobody else.
select has_function('ql_api', 'attempt_activation_v1',
  array['text', 'uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'text'],
  'attempt_activation_v1(text, uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, text) exists');
select is_definer('ql_api', 'attempt_activation_v1',
  array['text', 'uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'text'],
  'attempt_activation_v1 runs as its owner (SECURITY DEFINER)');
select function_returns('ql_api', 'attempt_activation_v1',
  array['text', 'uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'text'], 'jsonb',
  'attempt_activation_v1 returns a typed jsonb result');
select is((select p.proconfig from pg_catalog.pg_proc p
           where p.oid = 'ql_api.attempt_activation_v1(text, uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, text)'::regprocedure),
  array['search_path=pg_catalog, pg_temp'],
  'attempt_activation_v1 pins search_path to pg_catalog, pg_temp');
select function_privs_are('ql_api', 'attempt_activation_v1',
  array['text', 'uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'text'],
  'ql_runtime', array['EXECUTE'], 'the runtime role may execute attempt_activation_v1');
select function_privs_are('ql_api', 'attempt_activation_v1',
  array['text', 'uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'text'],
  'public', array[]::text[], 'PUBLIC may not execute attempt_activation_v1');
select function_privs_are('ql', 'attempt_fence',
  array['uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea'],
  'ql_runtime', array[]::text[], 'the runtime role may not call the private fence ql.attempt_fence directly');

-- Fixtures. Every Run is created and pulled at once, so each pull takes exactly that Run.
select pg_temp.mk_project() as project \gset
select pg_temp.mk_project() as project2 \gset
select pg_temp.mk_revision(:'project', '{"argv": ["sleep", "1"], "timeoutMs": 5000}') as rev_timeout \gset
select pg_temp.mk_revision(:'project', '{"argv": ["true"]}') as rev_plain \gset
select pg_temp.mk_revision(:'project2', '{"argv": ["true"]}') as rev_other \gset
select pg_temp.mk_worker() as w \gset
select pg_temp.mk_worker() as w2 \gset
select pg_temp.mk_worker() as w3 \gset
select pg_temp.digest('token-a') as tok \gset
set local role ql_runtime;
select pg_temp.open_session(:'w', 16) as s \gset
select pg_temp.open_session(:'w2') as s2 \gset
select pg_temp.open_session(:'w3') as s3 \gset
reset role;

-- 1. A plan with timeoutMs: starting pins the durable deadline, then running, replays, completion.
select pg_temp.mk_run(:'rev_timeout') as a_run \gset
set local role ql_runtime;
select pg_temp.pull(:'w', :'s') as oa \gset
reset role;
select :'oa'::jsonb ->> 'attemptId' as a_attempt \gset
select is(:'oa'::jsonb ->> 'runId', :'a_run', 'setup: the worker holds the offer of Run A');
select r.status as a_status0, a.version as a_v0, a.callback_sequence as a_cb0
  from ql.runs r join ql.run_attempts a on a.run_id = r.id where a.id = :'a_attempt' \gset

select ql.now_ms() as t0 \gset
set local role ql_runtime;
select pg_temp.activate('starting', :'w', :'s', :'oa') as a_start \gset
reset role;
select ql.now_ms() as t1 \gset
select deadline_at_ms as a_deadline, started_at_ms as a_started from ql.run_attempts where id = :'a_attempt' \gset

select is(:'a_start'::jsonb ->> 'status', 'applied', 'the starting ACK of a claimed Attempt is applied');
select ok(:a_deadline::bigint between :t0 + 5000 and :t1 + 5000,
  'the starting ACK writes deadline_at_ms = database time during the call + plan timeoutMs');
select is(:a_deadline::bigint - :a_started::bigint, 5000::bigint,
  'deadline and start time come from the same single database time read');
select is((:'a_start'::jsonb -> 'snapshot' ->> 'deadlineAtMs')::bigint, :a_deadline::bigint,
  'the snapshot projects the stored deadline');
select is((select e.payload from ql.run_events e where e.run_id = :'a_run' and e.type = 'attempt.starting'),
  jsonb_build_object('attemptNo', 1, 'deadlineAtMs', :a_deadline::bigint),
  'the attempt.starting event carries the same deadline as the column and the snapshot');
select is(:'a_start'::jsonb -> 'snapshot', pg_temp.snap(:'a_attempt'),
  'the applied answer carries the exact snapshot of the stored Attempt');
select is(array(select k from jsonb_object_keys(:'a_start'::jsonb) k order by k), array['snapshot', 'status'],
  'an applied ACK answers exactly status and snapshot');
select is(array(select k from jsonb_object_keys(:'a_start'::jsonb -> 'snapshot') k order by k),
  array['artifacts', 'attemptId', 'attemptNo', 'attemptStatus', 'attemptVersion', 'callbackSequence',
        'cancelReason', 'cancelRequestedAtMs', 'deadlineAtMs',
        'endedAtMs', 'errorCode', 'executor', 'exitCode', 'leaseExpiresAtMs', 'leaseGeneration', 'leaseVersion',
        'offerId', 'projectId', 'runId', 'runStatus', 'runningAtMs', 'startedAtMs'],
  'the snapshot has exactly the activation contract''s keys');
select ok(:'a_start' !~ encode(:'tok'::bytea, 'hex') and :'a_start' !~ 'token-a',
  'the answer carries neither the lease token nor its digest');
select is(array[:'a_status0', (select status::text from ql.runs where id = :'a_run'),
                :'a_start'::jsonb -> 'snapshot' ->> 'runStatus', :'a_start'::jsonb -> 'snapshot' ->> 'attemptStatus'],
  array['queued', 'running', 'running', 'starting'],
  'the starting ACK moves the Run from queued to running and the Attempt to starting');
select results_eq(
  format('select a.version, a.callback_sequence from ql.run_attempts a where a.id = %L', :'a_attempt'),
  format('values (%s::bigint, %s::integer)', :a_v0 + 1, :a_cb0 + 1),
  'the starting ACK increments the Attempt version and callback sequence by one');
select results_eq(format('select * from pg_temp.event_types(%L)', :'a_run'),
  $$values (1::bigint, 'run.queued'::text), (2, 'attempt.starting')$$,
  'attempt.starting follows run.queued (the claim writes no event)');
select ok(pg_temp.stream_ok(:'a_run'), 'the event sequence is contiguous from 1 and the Run version is 1 + its events');
select results_eq(
  format('select e.actor_kind::text, e.actor_id, e.attempt_id, e.occurred_at_ms::bigint, e.dedupe_key
            from ql.run_events e where e.run_id = %L and e.sequence = 2', :'a_run'),
  format('values (%L::text, %L::uuid, %L::uuid, %s::bigint, %L::text)',
         'worker', :'w', :'a_attempt', :a_started, 'attempt.starting:' || :'a_attempt'),
  'the attempt.starting event is the worker''s, of this Attempt, at the start time');

-- A replayed starting ACK.
select pg_temp.state() as before \gset
set local role ql_runtime;
select pg_temp.activate('starting', :'w', :'s', :'oa') as a_replay \gset
reset role;
select is(:'a_replay'::jsonb ->> 'status', 'already_starting', 'a replayed starting ACK answers already_starting');
select is(:'a_replay'::jsonb -> 'snapshot', :'a_start'::jsonb -> 'snapshot',
  'the replay carries the exact snapshot of the applied ACK');
select is(pg_temp.state(), :'before', 'a replayed starting ACK changes nothing');

-- The running ACK.
set local role ql_runtime;
select pg_temp.activate('running', :'w', :'s', :'oa') as a_running \gset
reset role;
select is(:'a_running'::jsonb ->> 'status', 'applied', 'the running ACK of a starting Attempt is applied');
select results_eq(
  format('select a.status::text, a.version, a.callback_sequence, a.running_at_ms is not null, a.deadline_at_ms::bigint
            from ql.run_attempts a where a.id = %L', :'a_attempt'),
  format('values (%L::text, %s::bigint, %s::integer, true, %s::bigint)', 'running', :a_v0 + 2, :a_cb0 + 2, :a_deadline),
  'the running ACK moves the Attempt to running, version and callback sequence +1, deadline kept');
select results_eq(
  format('select r.status::text, r.version, r.event_sequence from ql.runs r where r.id = %L', :'a_run'),
  $$values ('running'::text, 3::bigint, 2::bigint)$$,
  'the running ACK writes no event and leaves the Run alone: running, version 3 after its 2 events');
select ok(pg_temp.stream_ok(:'a_run'), 'after running the stream is still contiguous and the version 1 + events');
select is(:'a_running'::jsonb -> 'snapshot', pg_temp.snap(:'a_attempt'),
  'the applied running answer carries the exact stored snapshot');

-- Replays after running, and a start failure after running.
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(pg_temp.activate('running', :'w', :'s', :'oa'),
  jsonb_build_object('status', 'already_running', 'snapshot', :'a_running'::jsonb -> 'snapshot'),
  'a replayed running ACK answers already_running with the exact snapshot');
select is(pg_temp.activate('starting', :'w', :'s', :'oa'),
  jsonb_build_object('status', 'already_running', 'snapshot', :'a_running'::jsonb -> 'snapshot'),
  'a late starting ACK after running answers already_running with the exact snapshot');
reset role;
select is(pg_temp.state(), :'before', 'replays after running change nothing');
set local role ql_runtime;
select is(pg_temp.activate('start_failure', :'w', :'s', :'oa', 'token-a', 'spawn.enoent'),
  '{"status": "fenced", "reason": "state_drift"}'::jsonb, 'a start failure after running is state drift');
reset role;
select is(pg_temp.state(), :'before', 'a start failure after running is state drift and nothing changes');

-- Completion, then every phase answers already_terminal.
set local role ql_runtime;
select is(pg_temp.complete(:'w', :'s', :'oa', 1, 0) ->> 'status', 'completed', 'setup: the running Attempt completes');
reset role;
select pg_temp.state() as before \gset
set local role ql_runtime;
select pg_temp.activate('starting', :'w', :'s', :'oa') as a_t1 \gset
select pg_temp.activate('running', :'w', :'s', :'oa') as a_t2 \gset
select pg_temp.activate('start_failure', :'w', :'s', :'oa', 'token-a', 'spawn.enoent') as a_t3 \gset
reset role;
select is(:'a_t1'::jsonb, jsonb_build_object('status', 'already_terminal', 'snapshot', pg_temp.snap(:'a_attempt')),
  'a starting ACK of a completed Attempt answers already_terminal with the exact snapshot');
select is(:'a_t2'::jsonb, jsonb_build_object('status', 'already_terminal', 'snapshot', pg_temp.snap(:'a_attempt')),
  'a running ACK of a completed Attempt answers already_terminal with the exact snapshot');
select is(:'a_t3'::jsonb, jsonb_build_object('status', 'already_terminal', 'snapshot', pg_temp.snap(:'a_attempt')),
  'a start failure of a completed Attempt answers already_terminal with the exact snapshot');
select is(pg_temp.state(), :'before', 'ACKs of a terminal Attempt change nothing');

-- 2. A plan without timeoutMs: no deadline anywhere; then a start failure after starting.
select pg_temp.mk_run(:'rev_plain') as b_run \gset
set local role ql_runtime;
select pg_temp.pull(:'w', :'s') as ob \gset
select pg_temp.activate('starting', :'w', :'s', :'ob') as b_start \gset
reset role;
select :'ob'::jsonb ->> 'attemptId' as b_attempt \gset
select is(array[:'ob'::jsonb ->> 'runId', :'b_start'::jsonb ->> 'status'], array[:'b_run', 'applied'],
  'the starting ACK of a plan without timeoutMs is applied');
select is((select deadline_at_ms::bigint from ql.run_attempts where id = :'b_attempt'), null::bigint,
  'without timeoutMs the deadline column stays NULL');
select is(:'b_start'::jsonb -> 'snapshot' -> 'deadlineAtMs', 'null'::jsonb,
  'without timeoutMs the snapshot''s deadline is null');
select is((select e.payload ->> 'deadlineAtMs' from ql.run_events e where e.run_id = :'b_run' and e.type = 'attempt.starting'),
  null, 'without timeoutMs the attempt.starting event carries no deadline');
select is((select status::text from ql.runs where id = :'b_run'), 'running', 'the Run is running without a deadline');

set local role ql_runtime;
select pg_temp.activate('start_failure', :'w', :'s', :'ob', 'token-a', 'spawn.eacces') as b_fail \gset
reset role;
select is(:'b_fail'::jsonb ->> 'status', 'applied', 'a start failure of a starting Attempt is applied');
select results_eq(
  format('select a.status::text, a.error_code, a.exit_code, a.ended_at_ms is not null, r.status::text,
                 r.ended_at_ms is not null, r.current_attempt_id
            from ql.run_attempts a join ql.runs r on r.id = a.run_id where a.id = %L', :'b_attempt'),
  format('values (%L::text, %L::text, null::integer, true, %L::text, true, null::uuid)', 'failed', 'spawn.eacces', 'failed'),
  'the start failure ends the Attempt failed with its error code and, with no retry left, the Run failed');
select results_eq(format('select * from pg_temp.event_types(%L)', :'b_run'),
  $$values (1::bigint, 'run.queued'::text), (2, 'attempt.starting'), (3, 'attempt.failed'), (4, 'run.failed')$$,
  'attempt.failed and run.failed follow attempt.starting');
select ok(pg_temp.stream_ok(:'b_run'), 'after the start failure the stream is contiguous and the version 1 + events');
select is(:'b_fail'::jsonb -> 'snapshot', pg_temp.snap(:'b_attempt'),
  'the applied start failure carries the exact stored snapshot');
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(pg_temp.activate('start_failure', :'w', :'s', :'ob', 'token-a', 'spawn.eacces'),
  jsonb_build_object('status', 'already_terminal', 'snapshot', :'b_fail'::jsonb -> 'snapshot'),
  'a replayed start failure answers already_terminal with the exact snapshot');
reset role;
select is(pg_temp.state(), :'before', 'a replayed start failure changes nothing');

-- 3. A start failure straight from claimed (the process never started).
select pg_temp.mk_run(:'rev_plain') as c_run \gset
set local role ql_runtime;
select pg_temp.pull(:'w', :'s') as oc \gset
select pg_temp.activate('start_failure', :'w', :'s', :'oc', 'token-a', 'spawn.enoent') as c_fail \gset
reset role;
select :'oc'::jsonb ->> 'attemptId' as c_attempt \gset
select is(array[:'oc'::jsonb ->> 'runId', :'c_fail'::jsonb ->> 'status'], array[:'c_run', 'applied'],
  'a start failure of a claimed Attempt is applied');
select results_eq(
  format('select a.status::text, a.started_at_ms::bigint, a.deadline_at_ms::bigint, a.error_code, r.status::text
            from ql.run_attempts a join ql.runs r on r.id = a.run_id where a.id = %L', :'c_attempt'),
  format('values (%L::text, null::bigint, null::bigint, %L::text, %L::text)', 'failed', 'spawn.enoent', 'failed'),
  'the claimed Attempt ends failed without ever starting, and the Run fails');
select results_eq(format('select * from pg_temp.event_types(%L)', :'c_run'),
  $$values (1::bigint, 'run.queued'::text), (2, 'attempt.failed'), (3, 'run.failed')$$,
  'attempt.failed and run.failed follow run.queued, contiguously (the claim wrote no event)');
select ok(pg_temp.stream_ok(:'c_run'), 'the stream of the failed claim is contiguous and the version 1 + events');

-- 4. A start failure under a cancel intent ends cancelled (user) or timed_out (timeout).
select pg_temp.mk_run(:'rev_plain') as d_run \gset
set local role ql_runtime;
select pg_temp.pull(:'w', :'s') as od \gset
reset role;
select ql.run_cancel_intent(:'d_run', 'user', 'user', null, ql.now_ms()) as d_seq \gset
set local role ql_runtime;
select is(pg_temp.activate('start_failure', :'w', :'s', :'od', 'token-a', 'spawn.enoent') -> 'snapshot' ->> 'attemptStatus',
  'cancelled', 'a start failure under a user cancel intent ends the Attempt cancelled');
reset role;
select is((select status::text from ql.runs where id = :'d_run'), 'cancelled', 'the Run under a user intent ends cancelled');
select pg_temp.mk_run(:'rev_plain') as t_run \gset
set local role ql_runtime;
select pg_temp.pull(:'w', :'s') as ot \gset
reset role;
select ql.run_cancel_intent(:'t_run', 'timeout', 'system', null, ql.now_ms()) as t_seq \gset
set local role ql_runtime;
select is(pg_temp.activate('start_failure', :'w', :'s', :'ot', 'token-a', 'spawn.enoent') -> 'snapshot' ->> 'runStatus',
  'timed_out', 'a start failure under a timeout intent ends the Attempt and the Run timed_out');
reset role;

-- 4b. No start under an intent: a starting ACK (first, or the replay just before spawn) ends the
--     Attempt and answers not_started; the snapshot carries the intent; a replay answers already_terminal.
select pg_temp.mk_run(:'rev_plain') as n_run \gset
set local role ql_runtime;
select pg_temp.pull(:'w', :'s') as onn \gset
reset role;
select ql.run_cancel_intent(:'n_run', 'user', 'user', null, ql.now_ms()) as n_seq \gset
select r.cancel_requested_at_ms as n_cancel_at from ql.runs r where r.id = :'n_run' \gset
set local role ql_runtime;
select pg_temp.activate('starting', :'w', :'s', :'onn') as n_res \gset
reset role;
select is(:'n_res'::jsonb ->> 'status', 'not_started', 'a starting ACK under a user intent answers not_started');
select is(:'n_res'::jsonb -> 'snapshot', pg_temp.snap((:'onn'::jsonb ->> 'attemptId')::uuid),
  'not_started carries the exact snapshot of the ended Attempt');
select is((:'n_res'::jsonb -> 'snapshot') - array['attemptId', 'offerId', 'projectId', 'runId', 'endedAtMs', 'attemptVersion',
                                                'leaseExpiresAtMs', 'executor', 'artifacts', 'attemptNo', 'leaseGeneration',
                                                'leaseVersion', 'callbackSequence'],
  jsonb_build_object('runStatus', 'cancelled', 'attemptStatus', 'cancelled', 'deadlineAtMs', null, 'startedAtMs', null,
                     'runningAtMs', null, 'exitCode', null, 'errorCode', 'start.cancelled',
                     'cancelRequestedAtMs', :n_cancel_at, 'cancelReason', 'user'),
  'the Attempt and the Run end cancelled without a start time; the snapshot carries the intent');
select results_eq(format('select * from pg_temp.event_types(%L)', :'n_run'),
  $$values (1::bigint, 'run.queued'::text), (2, 'run.cancel_requested'),
           (3, 'attempt.cancelled'), (4, 'run.cancelled')$$,
  'no attempt.starting event: the Attempt ended straight from claimed');
select ok(pg_temp.stream_ok(:'n_run'), 'the stream of the not-started Attempt is contiguous');
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(pg_temp.activate('starting', :'w', :'s', :'onn') ->> 'status', 'already_terminal',
  'a replayed starting ACK after not_started answers already_terminal');
reset role;
select is(pg_temp.state(), :'before', 'and changes nothing');
-- The replay just before spawn: the Attempt is already starting when the intent arrives.
select pg_temp.mk_run(:'rev_timeout') as m_run \gset
set local role ql_runtime;
select pg_temp.pull(:'w', :'s') as om \gset
select pg_temp.activate('starting', :'w', :'s', :'om') ->> 'status' as m_first \gset
reset role;
select ql.run_cancel_intent(:'m_run', 'timeout', 'system', null, ql.now_ms()) as m_seq \gset
set local role ql_runtime;
select pg_temp.activate('starting', :'w', :'s', :'om') as m_res \gset
reset role;
select is(:'m_first'::text, 'applied', 'setup: the first starting ACK applied');
select is(:'m_res'::jsonb ->> 'status', 'not_started', 'the replay before spawn under a timeout intent answers not_started');
select is(:'m_res'::jsonb -> 'snapshot' ->> 'attemptStatus', 'timed_out', 'the starting Attempt ends timed_out');
select is(:'m_res'::jsonb -> 'snapshot' ->> 'cancelReason', 'timeout', 'the snapshot carries reason timeout');
select ok(pg_temp.stream_ok(:'m_run'), 'the stream stays contiguous');

-- 5. An Attempt claimed under generation 1 is fenced once the worker re-enrolled as generation 2.
select pg_temp.mk_run(:'rev_plain') as g_run \gset
set local role ql_runtime;
select pg_temp.pull(:'w3', :'s3') as og \gset
reset role;
update ql.workers set generation = 2 where id = :'w3';
set local role ql_runtime;
select ql_api.worker_session_open_v1(:'w3', 2, pg_temp.digest('cert-a'), 4) ->> 'sessionId' as s3b \gset
reset role;
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.attempt_activation_v1('starting', :'w3', :'s3b', 2, (:'og'::jsonb ->> 'projectId')::uuid,
            (:'og'::jsonb ->> 'runId')::uuid, (:'og'::jsonb ->> 'attemptId')::uuid, (:'og'::jsonb ->> 'offerId')::uuid,
            1, :'tok'::bytea, null),
  '{"status": "fenced", "reason": "stale_generation"}'::jsonb,
  'an Attempt of an older worker generation is fenced even on the new generation''s live session');
reset role;
select is(pg_temp.state(), :'before', 'an Attempt of an older generation is fenced and nothing changes');

-- 6. A claim whose Run is no longer queued (forced here; convergence never leaves one) is state drift.
select pg_temp.mk_run(:'rev_plain') as h_run \gset
set local role ql_runtime;
select pg_temp.pull(:'w', :'s') as oh \gset
reset role;
update ql.runs set status = 'waiting_approval' where id = :'h_run';
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(pg_temp.activate('starting', :'w', :'s', :'oh'), '{"status": "fenced", "reason": "state_drift"}'::jsonb,
  'a starting ACK of a claim whose Run is not queued is state drift');
reset role;
select is(pg_temp.state(), :'before', 'a claim whose Run is not queued is state drift and nothing changes');

-- 7. Once the Lease expired even a replay is fenced; a terminal Attempt still answers its projection.
select pg_temp.mk_run(:'rev_timeout') as i_run \gset
set local role ql_runtime;
select pg_temp.pull(:'w', :'s') as oi \gset
select is(pg_temp.activate('starting', :'w', :'s', :'oi') ->> 'status', 'applied', 'setup: Run I is starting');
reset role;
select pg_temp.age_attempt(:'oi', 60000);
select pg_temp.age_attempt(:'oc', 60000);
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(pg_temp.activate('starting', :'w', :'s', :'oi'), '{"status": "fenced", "reason": "lease_expired"}'::jsonb,
  'a replayed starting ACK after the Lease expired is fenced lease_expired, not already_starting');
select is(pg_temp.activate('running', :'w', :'s', :'oi'), '{"status": "fenced", "reason": "lease_expired"}'::jsonb,
  'a running ACK after the Lease expired is fenced lease_expired');
reset role;
select is(pg_temp.state(), :'before', 'ACKs after the Lease expired change nothing');
set local role ql_runtime;
select pg_temp.activate('starting', :'w', :'s', :'oc') as c_late \gset
reset role;
select is(:'c_late'::jsonb, jsonb_build_object('status', 'already_terminal', 'snapshot', pg_temp.snap(:'c_attempt')),
  'an ended Attempt answers already_terminal with its exact snapshot even after its Lease expired');
select is(pg_temp.state(), :'before', 'the terminal projection changes nothing');

-- 8. Corruption: a Run whose pinned revision no longer joins its Task raises QLBUG and writes nothing.
select pg_temp.mk_run(:'rev_timeout') as k_run \gset
set local role ql_runtime;
select pg_temp.pull(:'w', :'s') as k_offer \gset
reset role;
set local session_replication_role = replica;  -- bypass the foreign key to simulate corruption
update ql.runs set task_id = (select task_id from ql.task_execution_revisions where id = :'rev_plain') where id = :'k_run';
set local session_replication_role = origin;
select pg_temp.state() as before \gset
set local role ql_runtime;
select throws_ok(format('select pg_temp.activate(%L, %L, %L, %L)', 'starting', :'w', :'s', :'k_offer'),
  'QLBUG', 'attempt_activation_v1: pinned revision does not join',
  'a starting ACK whose pinned revision does not join raises QLBUG');
reset role;
select is(pg_temp.state(), :'before', 'the QLBUG starting ACK writes nothing (no deadline, no event)');

-- 9. Invalid input, identity and fences on a claimed Attempt of Run E (w2 holds Run F of Project 2).
select pg_temp.mk_run(:'rev_timeout') as e_run \gset
set local role ql_runtime;
select pg_temp.pull(:'w', :'s') as oe \gset
reset role;
select pg_temp.mk_run(:'rev_other') as f_run \gset
set local role ql_runtime;
select pg_temp.pull(:'w2', :'s2') as of \gset
reset role;
select :'oe'::jsonb ->> 'projectId' as e_project, :'oe'::jsonb ->> 'attemptId' as e_attempt,
       :'oe'::jsonb ->> 'offerId' as e_offer,
       :'of'::jsonb ->> 'projectId' as f_project, :'of'::jsonb ->> 'attemptId' as f_attempt,
       :'of'::jsonb ->> 'offerId' as f_offer \gset
select is(array[:'oe'::jsonb ->> 'runId', :'of'::jsonb ->> 'runId', :'f_project'], array[:'e_run', :'f_run', :'project2'],
  'setup: w holds Run E, w2 holds Run F of Project 2');
select pg_temp.state() as before \gset

set local role ql_runtime;
select is(ql_api.attempt_activation_v1(null, :'w', :'s', 1, :'e_project', :'e_run', :'e_attempt', :'e_offer', 1, :'tok'::bytea, null),
  '{"status": "invalid", "reason": "phase"}'::jsonb,
  'a missing phase is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a missing phase is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('stopping', :'w', :'s', 1, :'e_project', :'e_run', :'e_attempt', :'e_offer', 1, :'tok'::bytea, null),
  '{"status": "invalid", "reason": "phase"}'::jsonb,
  'an unknown phase is invalid');
reset role;
select is(pg_temp.state(), :'before', 'an unknown phase is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('starting', :'w', :'s', 1, :'e_project', :'e_run', :'e_attempt', :'e_offer', 1, :'tok'::bytea, 'spawn.enoent'),
  '{"status": "invalid", "reason": "error_code"}'::jsonb,
  'a starting ACK with an error code is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a starting ACK with an error code is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('running', :'w', :'s', 1, :'e_project', :'e_run', :'e_attempt', :'e_offer', 1, :'tok'::bytea, 'spawn.enoent'),
  '{"status": "invalid", "reason": "error_code"}'::jsonb,
  'a running ACK with an error code is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a running ACK with an error code is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('start_failure', :'w', :'s', 1, :'e_project', :'e_run', :'e_attempt', :'e_offer', 1, :'tok'::bytea, null),
  '{"status": "invalid", "reason": "error_code"}'::jsonb,
  'a start failure without an error code is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a start failure without an error code is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('start_failure', :'w', :'s', 1, :'e_project', :'e_run', :'e_attempt', :'e_offer', 1, :'tok'::bytea, 'Spawn Failed'),
  '{"status": "invalid", "reason": "error_code"}'::jsonb,
  'a start failure with an error code outside [a-z0-9_.] is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a start failure with an error code outside [a-z0-9_.] is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('start_failure', :'w', :'s', 1, :'e_project', :'e_run', :'e_attempt', :'e_offer', 1, :'tok'::bytea, ''),
  '{"status": "invalid", "reason": "error_code"}'::jsonb,
  'a start failure with an empty error code is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a start failure with an empty error code is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('start_failure', :'w', :'s', 1, :'e_project', :'e_run', :'e_attempt', :'e_offer', 1, :'tok'::bytea, repeat('x', 65)),
  '{"status": "invalid", "reason": "error_code"}'::jsonb,
  'a start failure with a 65-character error code is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a start failure with a 65-character error code is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('starting', null, :'s', 1, :'e_project', :'e_run', :'e_attempt', :'e_offer', 1, :'tok'::bytea, null),
  '{"status": "invalid", "reason": "worker_id"}'::jsonb,
  'a missing worker id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a missing worker id is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('starting', :'w', null, 1, :'e_project', :'e_run', :'e_attempt', :'e_offer', 1, :'tok'::bytea, null),
  '{"status": "invalid", "reason": "session_id"}'::jsonb,
  'a missing session id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a missing session id is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('starting', :'w', :'s', null, :'e_project', :'e_run', :'e_attempt', :'e_offer', 1, :'tok'::bytea, null),
  '{"status": "invalid", "reason": "worker_generation"}'::jsonb,
  'a missing worker generation is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a missing worker generation is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('starting', :'w', :'s', 0, :'e_project', :'e_run', :'e_attempt', :'e_offer', 1, :'tok'::bytea, null),
  '{"status": "invalid", "reason": "worker_generation"}'::jsonb,
  'worker generation 0 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'worker generation 0 is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('starting', :'w', :'s', -1, :'e_project', :'e_run', :'e_attempt', :'e_offer', 1, :'tok'::bytea, null),
  '{"status": "invalid", "reason": "worker_generation"}'::jsonb,
  'a negative worker generation is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a negative worker generation is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('starting', :'w', :'s', 9007199254740992, :'e_project', :'e_run', :'e_attempt', :'e_offer', 1, :'tok'::bytea, null),
  '{"status": "invalid", "reason": "worker_generation"}'::jsonb,
  'worker generation 2^53 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'worker generation 2^53 is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('starting', :'w', :'s', 1, null, :'e_run', :'e_attempt', :'e_offer', 1, :'tok'::bytea, null),
  '{"status": "invalid", "reason": "project_id"}'::jsonb,
  'a missing project id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a missing project id is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('starting', :'w', :'s', 1, :'e_project', null, :'e_attempt', :'e_offer', 1, :'tok'::bytea, null),
  '{"status": "invalid", "reason": "run_id"}'::jsonb,
  'a missing run id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a missing run id is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('starting', :'w', :'s', 1, :'e_project', :'e_run', null, :'e_offer', 1, :'tok'::bytea, null),
  '{"status": "invalid", "reason": "attempt_id"}'::jsonb,
  'a missing attempt id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a missing attempt id is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('starting', :'w', :'s', 1, :'e_project', :'e_run', :'e_attempt', null, 1, :'tok'::bytea, null),
  '{"status": "invalid", "reason": "offer_id"}'::jsonb,
  'a missing offer id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a missing offer id is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('starting', :'w', :'s', 1, :'e_project', :'e_run', :'e_attempt', :'e_offer', null, :'tok'::bytea, null),
  '{"status": "invalid", "reason": "lease_generation"}'::jsonb,
  'a missing lease generation is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a missing lease generation is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('starting', :'w', :'s', 1, :'e_project', :'e_run', :'e_attempt', :'e_offer', 0, :'tok'::bytea, null),
  '{"status": "invalid", "reason": "lease_generation"}'::jsonb,
  'lease generation 0 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'lease generation 0 is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('starting', :'w', :'s', 1, :'e_project', :'e_run', :'e_attempt', :'e_offer', -1, :'tok'::bytea, null),
  '{"status": "invalid", "reason": "lease_generation"}'::jsonb,
  'a negative lease generation is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a negative lease generation is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('starting', :'w', :'s', 1, :'e_project', :'e_run', :'e_attempt', :'e_offer', 9007199254740992, :'tok'::bytea, null),
  '{"status": "invalid", "reason": "lease_generation"}'::jsonb,
  'lease generation 2^53 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'lease generation 2^53 is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('starting', :'w', :'s', 1, :'e_project', :'e_run', :'e_attempt', :'e_offer', 1, null, null),
  '{"status": "invalid", "reason": "token_digest"}'::jsonb,
  'a missing token digest is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a missing token digest is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('starting', :'w', :'s', 1, :'e_project', :'e_run', :'e_attempt', :'e_offer', 1, substring(:'tok'::bytea from 1 for 31), null),
  '{"status": "invalid", "reason": "token_digest"}'::jsonb,
  'a 31-byte token digest is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a 31-byte token digest is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('starting', :'w', :'s', 1, :'e_project', :'e_run', :'e_attempt', :'e_offer', 1, :'tok'::bytea || '\x00'::bytea, null),
  '{"status": "invalid", "reason": "token_digest"}'::jsonb,
  'a 33-byte token digest is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a 33-byte token digest is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('starting', :'w', :'s', 1, :'e_project', :'e_run', :'e_attempt', gen_random_uuid(), 1, :'tok'::bytea, null),
  '{"status": "fenced", "reason": "identity_mismatch"}'::jsonb,
  'an unknown offer beside the Attempt''s id is fenced identity_mismatch');
reset role;
select is(pg_temp.state(), :'before', 'an unknown offer changes nothing');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('starting', :'w', :'s', 1, :'f_project', :'f_run', :'f_attempt', :'f_offer', 1, :'tok'::bytea, null),
  '{"status": "not_found", "reason": "offer"}'::jsonb,
  'another worker''s offer is not found for this worker');
reset role;
select is(pg_temp.state(), :'before', 'another worker''s offer is not found for this worker and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('starting', :'w', :'s', 1, :'project2', :'e_run', :'e_attempt', :'e_offer', 1, :'tok'::bytea, null),
  '{"status": "fenced", "reason": "identity_mismatch"}'::jsonb,
  'another Project''s id with this Attempt is an identity mismatch');
reset role;
select is(pg_temp.state(), :'before', 'another Project''s id with this Attempt is an identity mismatch and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('starting', :'w', :'s', 1, :'e_project', :'a_run', :'e_attempt', :'e_offer', 1, :'tok'::bytea, null),
  '{"status": "fenced", "reason": "identity_mismatch"}'::jsonb,
  'another Run''s id with this Attempt is an identity mismatch');
reset role;
select is(pg_temp.state(), :'before', 'another Run''s id with this Attempt is an identity mismatch and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('starting', :'w', :'s', 1, :'e_project', :'e_run', :'a_attempt', :'e_offer', 1, :'tok'::bytea, null),
  '{"status": "fenced", "reason": "identity_mismatch"}'::jsonb,
  'another Attempt''s id with this offer is an identity mismatch');
reset role;
select is(pg_temp.state(), :'before', 'another Attempt''s id with this offer is an identity mismatch and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('starting', :'w', :'s2', 1, :'e_project', :'e_run', :'e_attempt', :'e_offer', 1, :'tok'::bytea, null),
  '{"status": "fenced", "reason": "stale_session"}'::jsonb,
  'another worker''s session is stale');
reset role;
select is(pg_temp.state(), :'before', 'another worker''s session is stale and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('starting', :'w', gen_random_uuid(), 1, :'e_project', :'e_run', :'e_attempt', :'e_offer', 1, :'tok'::bytea, null),
  '{"status": "fenced", "reason": "stale_session"}'::jsonb,
  'an unknown session is stale');
reset role;
select is(pg_temp.state(), :'before', 'an unknown session is stale and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('starting', :'w', :'s', 2, :'e_project', :'e_run', :'e_attempt', :'e_offer', 1, :'tok'::bytea, null),
  '{"status": "fenced", "reason": "stale_generation"}'::jsonb,
  'a worker generation other than the session''s is stale');
reset role;
select is(pg_temp.state(), :'before', 'a worker generation other than the session''s is stale and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('starting', :'w', :'s', 1, :'e_project', :'e_run', :'e_attempt', :'e_offer', 2, :'tok'::bytea, null),
  '{"status": "fenced", "reason": "stale_lease_generation"}'::jsonb,
  'a lease generation other than the Lease''s is stale');
reset role;
select is(pg_temp.state(), :'before', 'a lease generation other than the Lease''s is stale and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('starting', :'w', :'s', 1, :'e_project', :'e_run', :'e_attempt', :'e_offer', 1, pg_temp.digest('token-b'), null),
  '{"status": "fenced", "reason": "token_mismatch"}'::jsonb,
  'another token''s digest is a token mismatch');
reset role;
select is(pg_temp.state(), :'before', 'another token''s digest is a token mismatch and nothing changes');

set local role ql_runtime;
select is(ql_api.attempt_activation_v1('running', :'w', :'s', 1, :'e_project', :'e_run', :'e_attempt', :'e_offer', 1, :'tok'::bytea, null),
  '{"status": "fenced", "reason": "state_drift"}'::jsonb,
  'a running ACK before the starting ACK is state drift');
reset role;
select is(pg_temp.state(), :'before', 'a running ACK before the starting ACK is state drift and nothing changes');


-- A replaced session is stale; the worker continues on its new session.
set local role ql_runtime;
select pg_temp.open_session(:'w', 16) as s_new \gset
reset role;
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(pg_temp.activate('starting', :'w', :'s', :'oe'), '{"status": "fenced", "reason": "stale_session"}'::jsonb,
  'an ACK on a replaced session is stale');
reset role;
select is(pg_temp.state(), :'before', 'an ACK on a replaced session is stale and nothing changes');

-- An expired live session.
select expires_at_ms as s_new_expires from ql.worker_sessions where id = :'s_new' \gset
update ql.worker_sessions set expires_at_ms = ql.now_ms() - 1 where id = :'s_new';
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(pg_temp.activate('starting', :'w', :'s_new', :'oe'), '{"status": "fenced", "reason": "session_expired"}'::jsonb,
  'an ACK on a live session past its expiry is session_expired');
reset role;
select is(pg_temp.state(), :'before', 'an ACK on an expired session is fenced and nothing changes');
update ql.worker_sessions set expires_at_ms = :s_new_expires where id = :'s_new';

-- An expired Lease: the claim's Lease (= offer expiry) passed before the starting ACK.
select pg_temp.age_attempt(:'oe', 60000);
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(pg_temp.activate('starting', :'w', :'s_new', :'oe'), '{"status": "fenced", "reason": "lease_expired"}'::jsonb,
  'a starting ACK after the claim''s Lease expired is fenced lease_expired');
reset role;
select is(pg_temp.state(), :'before', 'a starting ACK after the Lease expired changes nothing (no deadline, no start)');

select * from finish();
rollback;
