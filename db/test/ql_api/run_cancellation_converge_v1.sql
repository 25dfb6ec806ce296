-- Tests ql_api.run_cancellation_converge_v1: one bounded page of cancellation convergence — queued+claimed, lost+terminal
-- Attempt, timeout, blocked start barrier, stable event ids, paging (decision 0000 (ADR-0118 §7, evidence 11); docs/architecture.md §4 item 8).
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(73);

-- Everything stored about one Run (its row, Attempts, Leases, Offers, events), to prove "nothing changed for it".
create function pg_temp.run_image(p_run uuid) returns text language sql
return (select string_agg(t, E'\n' order by t) from (
  select 'run ' || r::text as t from ql.runs r where r.id = p_run union all
  select 'attempt ' || a::text from ql.run_attempts a where a.run_id = p_run union all
  select 'lease ' || l::text from ql.run_leases l join ql.run_attempts a on a.id = l.attempt_id where a.run_id = p_run union all
  select 'event ' || e::text from ql.run_events e where e.run_id = p_run) q);

-- The Run's (status, version, event_sequence, current_attempt_id, cancel_reason, ended?) as text.
create function pg_temp.run_row(p_run uuid) returns text language sql
return (select (r.status, r.version, r.event_sequence, r.current_attempt_id, r.cancel_reason, r.ended_at_ms is not null)::text
          from ql.runs r where r.id = p_run);

-- The documented event id construction, written out independently of ql.stable_event_id.
create function pg_temp.sha_id(p_domain text, p_run uuid, p_attempt uuid, p_at bigint) returns uuid language sql immutable
return encode(substr(sha256(convert_to(p_domain || '|' || p_run::text || '|' || coalesce(p_attempt::text, '-') || '|' || p_at::text,
                                      'UTF8')), 1, 16), 'hex')::uuid;

-- An ok page result with the given Run ids (jsonb arrays of uuid text).
create function pg_temp.page(p_scanned int, p_converged jsonb, p_blocked jsonb) returns jsonb language sql
return jsonb_build_object('status', 'ok', 'scanned', p_scanned, 'converged', jsonb_array_length(p_converged),
                          'blocked', jsonb_array_length(p_blocked), 'convergedRunIds', p_converged, 'blockedRunIds', p_blocked);

-- ---------------------------------------------------------------------------------------------
-- Structure: a page function of the scheduler, SECURITY DEFINER, not callable by the shell's role.
select has_function('ql_api', 'run_cancellation_converge_v1', array['integer'],
  'cancellation convergence exists with one typed limit parameter');
select is_definer('ql_api', 'run_cancellation_converge_v1', array['integer'],
  'cancellation convergence is SECURITY DEFINER');
select function_returns('ql_api', 'run_cancellation_converge_v1', array['integer'], 'jsonb',
  'cancellation convergence answers a jsonb result');
select is((select p.proconfig from pg_proc p where p.oid = 'ql_api.run_cancellation_converge_v1(integer)'::regprocedure),
  array['search_path=pg_catalog, pg_temp'], 'cancellation convergence pins search_path to pg_catalog, pg_temp');
select function_privs_are('ql_api', 'run_cancellation_converge_v1', array['integer'],
  'ql_scheduler', array['EXECUTE'], 'the scheduler role (pg_cron) may execute cancellation convergence');
select function_privs_are('ql_api', 'run_cancellation_converge_v1', array['integer'],
  'ql_runtime', array[]::text[], 'the runtime role (the shell) may not execute cancellation convergence');
select function_privs_are('ql_api', 'run_cancellation_converge_v1', array['integer'],
  'public', array[]::text[], 'PUBLIC may not execute cancellation convergence');
set local role ql_runtime;
select throws_ok('select ql_api.run_cancellation_converge_v1(1)', '42501',
  'permission denied for function run_cancellation_converge_v1', 'the runtime role calling convergence is refused');
reset role;

-- ---------------------------------------------------------------------------------------------
-- Runs convergence must never touch, created first and checked at the very end:
--   no intent: a queued Run, a Run whose claim expired, a retry_wait Run;
--   terminal: a cancelled Run that carries an intent, a succeeded Run;
--   status running with an intent (past the start barrier): a starting Attempt, and a running Attempt whose
--   Lease even expired — only the Worker's completion or lease-expiry recovery may end those.
select pg_temp.mk_run(pg_temp.mk_revision(pg_temp.mk_project())) as n_plain \gset
select pg_temp.mk_run(pg_temp.mk_revision(pg_temp.mk_project())) as n_retry \gset
update ql.runs set status = 'retry_wait', retry_at_ms = ql.now_ms() - 1000 where id = :'n_retry';
select pg_temp.mk_scenario() as n_claim_w, pg_temp.mk_scenario() as n_cancelled_w, pg_temp.mk_scenario() as n_ok_w,
       pg_temp.mk_scenario('{"argv": ["sleep", "60"], "timeoutMs": 5000}') as b_starting_w,
       pg_temp.mk_scenario('{"argv": ["sleep", "60"], "timeoutMs": 5000}') as b_running_w \gset
set local role ql_runtime;
select o, o ->> 'runId' as r from pg_temp.offer_at(:'n_claim_w', 'claimed') o \gset n_claim_
select o, o ->> 'runId' as r, o ->> 'sessionId' as s from pg_temp.offer_at(:'n_cancelled_w', 'running') o \gset n_cancelled_
select o, o ->> 'runId' as r, o ->> 'sessionId' as s from pg_temp.offer_at(:'n_ok_w', 'running') o \gset n_ok_
select o, o ->> 'runId' as r from pg_temp.offer_at(:'b_starting_w', 'starting') o \gset b_starting_
select o, o ->> 'runId' as r from pg_temp.offer_at(:'b_running_w', 'running') o \gset b_running_
reset role;
select pg_temp.age_attempt(:'n_claim_o', 60000);
select ql.run_cancel_intent(:'n_cancelled_r', 'user', 'user', null, ql.now_ms()) as seq \gset
set local role ql_runtime;
select pg_temp.complete(:'n_cancelled_w', :'n_cancelled_s', :'n_cancelled_o', 1, null, 'killed') ->> 'status' as done1,
       pg_temp.complete(:'n_ok_w', :'n_ok_s', :'n_ok_o', 1, 0) ->> 'status' as done2 \gset
reset role;
select ql.run_cancel_intent(:'b_starting_r', 'user', 'user', null, ql.now_ms() - 500000) as seq \gset
select ql.run_cancel_intent(:'b_running_r', 'timeout', 'system', null, ql.now_ms() - 500000) as seq \gset
select pg_temp.age_attempt(:'b_running_o', 60000);
select pg_temp.run_image(:'n_plain') || pg_temp.run_image(:'n_claim_r') || pg_temp.run_image(:'n_retry') as img_no_intent,
       pg_temp.run_image(:'n_cancelled_r') || pg_temp.run_image(:'n_ok_r') as img_terminal,
       pg_temp.run_image(:'b_starting_r') || pg_temp.run_image(:'b_running_r') as img_running \gset
select is((select array_agg((r.status, r.cancel_reason)::text order by r.id::text = :'n_cancelled_r' desc, r.id::text = :'b_starting_r' desc)
             from ql.runs r where r.id in (:'n_cancelled_r', :'b_starting_r', :'b_running_r')),
  array['(cancelled,user)', '(running,user)', '(running,timeout)'],
  'setup: a terminal Run with an intent, and two running Runs (starting, running) with the oldest intents of all');

-- An idle pass: only the Runs above exist; none is a candidate.
select pg_temp.state() as before \gset
set local role ql_scheduler;
select ql_api.run_cancellation_converge_v1(128) as res \gset
reset role;
select is(:'res'::jsonb, pg_temp.page(0, '[]', '[]'),
  'an idle pass scans nothing: running Runs with intents are not even scanned (not blocked, not converged)');
select is(pg_temp.state(), :'before', 'an idle pass writes nothing');

-- ---------------------------------------------------------------------------------------------
-- Evidence 11, queued + claimed: a claimed Attempt whose Lease expired, and a user intent.
select pg_temp.mk_scenario() as s1_w \gset
set local role ql_runtime;
select o, o ->> 'runId' as r, o ->> 'attemptId' as a from pg_temp.offer_at(:'s1_w', 'claimed') o \gset s1_
reset role;
select pg_temp.run_row(:'s1_r') as s1_claimed \gset
select ql.run_cancel_intent(:'s1_r', 'user', 'user', null, ql.now_ms()) as s1_seq \gset
select r.cancel_requested_at_ms as s1_at, r.version as s1_version from ql.runs r where r.id = :'s1_r' \gset
select pg_temp.age_attempt(:'s1_o', 31000);   -- the offer Lease (30 s) expired a second ago
select is(:'s1_claimed'::text, format('(queued,2,1,%s,,f)', :'s1_a'),
  'setup: queued Run at version 2 / sequence 1 (run.queued; the claim writes no event) holding its claimed Attempt');
select ok(:s1_seq = 2 and :s1_version = 3
          and (select l.expires_at_ms < ql.now_ms() from ql.run_leases l where l.attempt_id = :'s1_a'),
  'setup: the user intent is event 2 (Run version 3), and the claim''s Lease has expired');

select ql.now_ms() as t0 \gset
set local role ql_scheduler;
select ql_api.run_cancellation_converge_v1(10) as res \gset
reset role;
select ql.now_ms() as t1 \gset
select is(:'res'::jsonb, pg_temp.page(1, jsonb_build_array(:'s1_r'), '[]'),
  'queued + expired claim with an intent: scanned 1, converged 1, its id reported');
select is(pg_temp.run_row(:'s1_r'), '(cancelled,5,4,,user,t)',
  'the Run is cancelled at version 5 = 3 + 2 and event sequence 4, holds no Attempt, and has ended');
select results_eq(format($$select a.status::text, a.version, a.ended_at_ms is not null from ql.run_attempts a where a.id = %L$$, :'s1_a'),
  $$values ('cancelled'::text, 2::bigint, true)$$,
  'the claimed Attempt is cancelled (version +1) and has ended');
select results_eq(format($$select e.sequence, e.type, e.actor_kind::text, e.actor_id, e.attempt_id, e.payload
                            from ql.run_events e where e.run_id = %L and e.sequence > 2 order by e.sequence$$, :'s1_r'),
  format($$values (3::bigint, 'attempt.cancelled'::text, 'reconciler'::text, null::uuid, %1$L::uuid, '{"attemptNo": 1}'::jsonb),
                  (4::bigint, 'run.cancelled'::text, 'reconciler'::text, null::uuid, %1$L::uuid, '{"status": "cancelled"}'::jsonb)$$, :'s1_a'),
  'two reconciler events, attempt.cancelled then run.cancelled, at the next contiguous sequences 3 and 4');
-- decision 0000 (ADR-0118 evidence 11) names the sequence run.cancel_requested → attempt.cancelled → run.cancelled with the Run
-- at version 4 / event sequence 3: there the stream begins at the intent. This fixture's Run also carries
-- run.queued (1, from the enqueue; the pull's claim writes no event), so the same three events are
-- sequences 2..4 and the Run ends at version 5 = 1 + 4 events, event sequence 4.
select results_eq(format($$select e.sequence, e.type from ql.run_events e where e.run_id = %L order by e.sequence$$, :'s1_r'),
  $$values (1::bigint, 'run.queued'::text), (2, 'run.cancel_requested'), (3, 'attempt.cancelled'), (4, 'run.cancelled')$$,
  'the full stream: run.queued, then evidence 11''s run.cancel_requested → attempt.cancelled → run.cancelled, contiguous');
select ok(pg_temp.stream_ok(:'s1_r'), 'the stream is contiguous from 1 and every event bumped the version once');
select ok((select count(distinct e.occurred_at_ms) = 1 and min(e.occurred_at_ms) between :t0 and :t1
                  and min(e.occurred_at_ms) = (select r.ended_at_ms from ql.runs r where r.id = :'s1_r')
                  and min(e.occurred_at_ms) = (select a.ended_at_ms from ql.run_attempts a where a.id = :'s1_a')
             from ql.run_events e where e.run_id = :'s1_r' and e.sequence in (3, 4)),
  'both events, the Attempt''s and the Run''s end share one database time read during the pass');
select results_eq(format($$select e.event_id from ql.run_events e where e.run_id = %L and e.sequence in (3, 4) order by e.sequence$$, :'s1_r'),
  format($$values (ql.stable_event_id('ql.converge.attempt', %1$L, %2$L, %3$s)), (ql.stable_event_id('ql.converge.run', %1$L, %2$L, %3$s))$$,
         :'s1_r', :'s1_a', :s1_at),
  'the event ids are ql.stable_event_id over (ql.converge.attempt | ql.converge.run, Run, Attempt, cancel_requested_at_ms)');
select results_eq(format($$select e.event_id from ql.run_events e where e.run_id = %L and e.sequence in (3, 4) order by e.sequence$$, :'s1_r'),
  format($$values (pg_temp.sha_id('ql.converge.attempt', %1$L, %2$L, %3$s)), (pg_temp.sha_id('ql.converge.run', %1$L, %2$L, %3$s))$$,
         :'s1_r', :'s1_a', :s1_at),
  'computed independently: the first 128 bits of SHA-256 over domain|run|attempt|cancel time');
select results_eq(format($$select e.dedupe_key from ql.run_events e where e.run_id = %L and e.sequence in (3, 4) order by e.sequence$$, :'s1_r'),
  format($$values ('attempt.ended:' || %1$L), ('run.after_attempt:' || %1$L)$$, :'s1_a'),
  'the dedupe keys name the ended Attempt, so no second end of it can be written');

-- Idempotent: a second pass finds nothing; a retried write of the same intent is refused by its stable id.
select pg_temp.state() as before \gset
set local role ql_scheduler;
select ql_api.run_cancellation_converge_v1(10) as res \gset
reset role;
select is(:'res'::jsonb, pg_temp.page(0, '[]', '[]'), 'a second pass scans 0: convergence is idempotent');
select is(pg_temp.state(), :'before', 'the second pass writes nothing');
select throws_ok(format($$select ql.run_event(%L, null, 'run.cancelled', 'reconciler', null, null, '{}', ql.now_ms(),
                                             'a-retried-pass', ql.stable_event_id('ql.converge.run', %L, %L, %s))$$,
                        :'s1_r', :'s1_r', :'s1_a', :s1_at),
  '23505', 'duplicate key value violates unique constraint "run_events_event_id_key"',
  'a retried pass that recomputes the run event''s stable id is refused by the unique event_id');
select is(pg_temp.state(), :'before', 'the refused double write left nothing behind');

-- ---------------------------------------------------------------------------------------------
-- Timeout intent: the same path ends the Attempt and the Run timed_out.
select pg_temp.mk_scenario() as s2_w \gset
set local role ql_runtime;
select o, o ->> 'runId' as r, o ->> 'attemptId' as a from pg_temp.offer_at(:'s2_w', 'claimed') o \gset s2_
reset role;
select ql.run_cancel_intent(:'s2_r', 'timeout', 'system', null, ql.now_ms()) as s2_seq \gset
select r.cancel_requested_at_ms as s2_at from ql.runs r where r.id = :'s2_r' \gset
select pg_temp.age_attempt(:'s2_o', 31000);
set local role ql_scheduler;
select ql_api.run_cancellation_converge_v1(10) as res \gset
reset role;
select is(:'res'::jsonb, pg_temp.page(1, jsonb_build_array(:'s2_r'), '[]'), 'a timeout intent over an expired claim converges');
select is(pg_temp.run_row(:'s2_r'), '(timed_out,5,4,,timeout,t)', 'the Run is timed_out at version 5 = 3 + 2, sequence 4');
select is((select a.status::text from ql.run_attempts a where a.id = :'s2_a'), 'timed_out', 'the Attempt is timed_out');
select results_eq(format($$select e.sequence, e.type, e.actor_kind::text, e.event_id from ql.run_events e
                            where e.run_id = %L and e.sequence > 2 order by e.sequence$$, :'s2_r'),
  format($$values (3::bigint, 'attempt.timed_out'::text, 'reconciler'::text, pg_temp.sha_id('ql.converge.attempt', %1$L, %2$L, %3$s)),
                  (4::bigint, 'run.timed_out'::text, 'reconciler'::text, pg_temp.sha_id('ql.converge.run', %1$L, %2$L, %3$s))$$,
         :'s2_r', :'s2_a', :s2_at),
  'attempt.timed_out then run.timed_out by the reconciler, with their stable ids');

-- ---------------------------------------------------------------------------------------------
-- lost + terminal Attempt: a lost Run (not terminal) whose latest Attempt is lost gets only the Run's event.
select pg_temp.mk_scenario() as s3_w \gset
set local role ql_runtime;
select o, o ->> 'runId' as r, o ->> 'attemptId' as a from pg_temp.offer_at(:'s3_w', 'running') o \gset s3_
reset role;
select ql.run_cancel_intent(:'s3_r', 'user', 'user', null, ql.now_ms()) as s3_seq \gset
-- As lease-expiry recovery leaves it (its own file shows that path): Attempt lost, Run lost, no current Attempt.
update ql.run_attempts set status = 'lost', ended_at_ms = ql.now_ms() where id = :'s3_a';
update ql.runs set status = 'lost', current_attempt_id = null where id = :'s3_r';
select r.cancel_requested_at_ms as s3_at, r.version as s3_version, r.event_sequence as s3_sequence,
       (select a::text from ql.run_attempts a where a.id = :'s3_a') as s3_attempt
  from ql.runs r where r.id = :'s3_r' \gset
select ql.now_ms() as t0 \gset
set local role ql_scheduler;
select ql_api.run_cancellation_converge_v1(10) as res \gset
reset role;
select ql.now_ms() as t1 \gset
select is(:'res'::jsonb, pg_temp.page(1, jsonb_build_array(:'s3_r'), '[]'),
  'a lost Run with an intent is a candidate (lost is not terminal) and converges');
select is(pg_temp.run_row(:'s3_r'), format('(cancelled,%s,%s,,user,t)', :s3_version + 1, :s3_sequence + 1),
  'the Run is cancelled with exactly one more version and one more event');
select results_eq(format($$select e.sequence, e.type, e.actor_kind::text, e.actor_id, e.attempt_id, e.payload, e.dedupe_key
                            from ql.run_events e where e.run_id = %L and e.sequence > %s order by e.sequence$$, :'s3_r', :s3_sequence),
  format($$values (%s::bigint, 'run.cancelled'::text, 'reconciler'::text, null::uuid, null::uuid,
                   '{"status": "cancelled", "reason": "user", "from": "lost"}'::jsonb, 'run.converged:' || %L)$$,
         :s3_sequence + 1, :'s3_r'),
  'only run.cancelled is written, by the reconciler, naming the intent''s reason and the status it left');
select is((select a::text from ql.run_attempts a where a.id = :'s3_a'), :'s3_attempt',
  'the already-ended (lost) Attempt is not rewritten');
select is((select e.event_id from ql.run_events e where e.run_id = :'s3_r' and e.type = 'run.cancelled'),
  pg_temp.sha_id('ql.converge.run', :'s3_r', null, :s3_at),
  'without a live Attempt the run event id is the stable id over (ql.converge.run, Run, "-", cancel time)');
select ok((select e.occurred_at_ms between :t0 and :t1 and e.occurred_at_ms = r.ended_at_ms
             from ql.run_events e join ql.runs r on r.id = e.run_id where e.run_id = :'s3_r' and e.type = 'run.cancelled'),
  'the event and the Run''s end carry one database time read during the pass');
select ok(pg_temp.stream_ok(:'s3_r'), 'the lost Run''s stream stays contiguous');

-- ---------------------------------------------------------------------------------------------
-- queued without an Attempt: one event. With run.queued first, this Run lands exactly on evidence 11's
-- numbers: version 4, event sequence 3 (run.queued, run.cancel_requested, run.cancelled).
select pg_temp.mk_run(pg_temp.mk_revision(pg_temp.mk_project())) as s4_r \gset
select ql.run_cancel_intent(:'s4_r', 'user', 'user', null, ql.now_ms()) as s4_seq \gset
select r.cancel_requested_at_ms as s4_at from ql.runs r where r.id = :'s4_r' \gset
set local role ql_scheduler;
select ql_api.run_cancellation_converge_v1(10) as res \gset
reset role;
select is(:'res'::jsonb, pg_temp.page(1, jsonb_build_array(:'s4_r'), '[]'), 'a queued Run without an Attempt converges');
select is(pg_temp.run_row(:'s4_r'), '(cancelled,4,3,,user,t)', 'the Run is cancelled at version 4, event sequence 3');
select results_eq(format($$select e.sequence, e.type, e.actor_kind::text, e.attempt_id, e.payload
                            from ql.run_events e where e.run_id = %L order by e.sequence$$, :'s4_r'),
  format($$values (1::bigint, 'run.queued'::text, 'system'::text, null::uuid, '{}'::jsonb),
                  (2, 'run.cancel_requested', 'user', null, jsonb_build_object('reason', 'user', 'cancelRequestedAtMs', %s::bigint)),
                  (3, 'run.cancelled', 'reconciler', null, '{"status": "cancelled", "reason": "user", "from": "queued"}')$$, :s4_at),
  'run.queued, run.cancel_requested, then exactly one reconciler run.cancelled naming the status it left');
select is((select e.event_id from ql.run_events e where e.run_id = :'s4_r' and e.sequence = 3),
  pg_temp.sha_id('ql.converge.run', :'s4_r', null, :s4_at), 'its event id is the stable id over (ql.converge.run, Run, "-", cancel time)');

-- ---------------------------------------------------------------------------------------------
-- created, waiting_approval, retry_wait with an intent: each converges with one event, oldest intent first.
select pg_temp.mk_run(pg_temp.mk_revision(pg_temp.mk_project())) as s5_created,
       pg_temp.mk_run(pg_temp.mk_revision(pg_temp.mk_project())) as s5_waiting,
       pg_temp.mk_run(pg_temp.mk_revision(pg_temp.mk_project())) as s5_retry, ql.now_ms() as s5_t \gset
update ql.runs set status = 'created', queued_at_ms = null where id = :'s5_created';
update ql.runs set status = 'waiting_approval' where id = :'s5_waiting';
update ql.runs set status = 'retry_wait', retry_at_ms = :s5_t + 600000 where id = :'s5_retry';
select ql.run_cancel_intent(:'s5_retry', 'user', 'user', null, :s5_t - 300) as seq \gset
select ql.run_cancel_intent(:'s5_created', 'user', 'user', null, :s5_t - 200) as seq \gset
select ql.run_cancel_intent(:'s5_waiting', 'user', 'user', null, :s5_t - 100) as seq \gset
set local role ql_scheduler;
select ql_api.run_cancellation_converge_v1(10) as res \gset
reset role;
select is(:'res'::jsonb, pg_temp.page(3, jsonb_build_array(:'s5_retry', :'s5_created', :'s5_waiting'), '[]'),
  'created, waiting_approval and retry_wait Runs with intents all converge, reported oldest intent first');
select results_eq(format($$select r.status::text, r.version, r.event_sequence, r.current_attempt_id, r.ended_at_ms is not null,
                                  e.type, e.payload ->> 'from'
                             from ql.runs r join ql.run_events e on e.run_id = r.id and e.sequence = r.event_sequence
                            where r.id in (%L, %L, %L) order by r.cancel_requested_at_ms$$, :'s5_retry', :'s5_created', :'s5_waiting'),
  $$values ('cancelled'::text, 4::bigint, 3::bigint, null::uuid, true, 'run.cancelled'::text, 'retry_wait'::text),
           ('cancelled', 4, 3, null, true, 'run.cancelled', 'created'),
           ('cancelled', 4, 3, null, true, 'run.cancelled', 'waiting_approval')$$,
  'each is cancelled with one run.cancelled event (version 4, sequence 3) naming the status it left');
select is((select count(*) from ql.run_attempts a where a.run_id in (:'s5_retry', :'s5_created', :'s5_waiting')), 0::bigint,
  'no Attempt is invented for Runs that had none');

-- ---------------------------------------------------------------------------------------------
-- Paging: five candidates, limit 2 → 2, 2, then a short page of 1, oldest intent first (not creation order).
select pg_temp.mk_run(pg_temp.mk_revision(pg_temp.mk_project())) as p1, pg_temp.mk_run(pg_temp.mk_revision(pg_temp.mk_project())) as p2,
       pg_temp.mk_run(pg_temp.mk_revision(pg_temp.mk_project())) as p3, pg_temp.mk_run(pg_temp.mk_revision(pg_temp.mk_project())) as p4,
       pg_temp.mk_run(pg_temp.mk_revision(pg_temp.mk_project())) as p5, ql.now_ms() as pt \gset
select ql.run_cancel_intent(:'p1', 'user', 'user', null, :pt - 100) as seq \gset
select ql.run_cancel_intent(:'p2', 'user', 'user', null, :pt - 400) as seq \gset
select ql.run_cancel_intent(:'p3', 'user', 'user', null, :pt - 200) as seq \gset
select ql.run_cancel_intent(:'p4', 'user', 'user', null, :pt - 500) as seq \gset
select ql.run_cancel_intent(:'p5', 'user', 'user', null, :pt - 300) as seq \gset

-- Invalid limits, while five candidates wait: each would otherwise write.
select pg_temp.state() as before \gset
set local role ql_scheduler;
select ql_api.run_cancellation_converge_v1(0) as inv0, ql_api.run_cancellation_converge_v1(129) as inv129,
       ql_api.run_cancellation_converge_v1(null) as invnull \gset
reset role;
select is(:'inv0'::jsonb, '{"status": "invalid", "reason": "limit"}', 'limit 0 is invalid');
select is(:'inv129'::jsonb, '{"status": "invalid", "reason": "limit"}', 'limit 129 is invalid (a page is at most 128)');
select is(:'invnull'::jsonb, '{"status": "invalid", "reason": "limit"}', 'a NULL limit is invalid');
select is(pg_temp.state(), :'before', 'invalid limits are refused and nothing changes');

set local role ql_scheduler;
select ql_api.run_cancellation_converge_v1(2) as page1 \gset
reset role;
select is(:'page1'::jsonb, pg_temp.page(2, jsonb_build_array(:'p4', :'p2'), '[]'),
  'page 1 (limit 2) scans 2 and converges the two oldest intents');
select is((select array_agg(r.status::text order by r.cancel_requested_at_ms) from ql.runs r where r.id in (:'p1', :'p2', :'p3', :'p4', :'p5')),
  array['cancelled', 'cancelled', 'queued', 'queued', 'queued'], 'after page 1 the three newer intents still wait, untouched');
set local role ql_scheduler;
select ql_api.run_cancellation_converge_v1(2) as page2 \gset
select ql_api.run_cancellation_converge_v1(2) as page3 \gset
reset role;
select is(:'page2'::jsonb, pg_temp.page(2, jsonb_build_array(:'p5', :'p3'), '[]'), 'page 2 scans the next 2 in intent order');
select is(:'page3'::jsonb, pg_temp.page(1, jsonb_build_array(:'p1'), '[]'), 'page 3 is short: scanned 1 < limit 2, the end of the work');
select pg_temp.state() as before \gset
set local role ql_scheduler;
select ql_api.run_cancellation_converge_v1(2) as page4 \gset
reset role;
select is(:'page4'::jsonb, pg_temp.page(0, '[]', '[]'), 'a fourth page scans 0');
select is(pg_temp.state(), :'before', 'and writes nothing');
select ok((select bool_and(pg_temp.run_row(r.id) = '(cancelled,4,3,,user,t)' and pg_temp.stream_ok(r.id))
             from ql.runs r where r.id in (:'p1', :'p2', :'p3', :'p4', :'p5')),
  'each paged Run converged once: cancelled at version 4 / sequence 3 with a contiguous stream');

-- ---------------------------------------------------------------------------------------------
-- Blocked start barrier: never faked.
--   k_claim: queued + claimed Attempt whose Lease is ACTIVE (a Worker holds it);
--   k_drift: a Run found in lost while its latest Attempt is starting (past the start barrier) with an expired
--            Lease — a state no function writes, forced here to reach the branch: starting wins over expiry.
select pg_temp.mk_scenario() as k_claim_w, pg_temp.mk_scenario('{"argv": ["sleep", "60"], "timeoutMs": 5000}') as k_drift_w \gset
set local role ql_runtime;
select o, o ->> 'runId' as r, o ->> 'attemptId' as a, o ->> 'sessionId' as s from pg_temp.offer_at(:'k_claim_w', 'claimed') o \gset k_claim_
select o, o ->> 'runId' as r, o ->> 'attemptId' as a from pg_temp.offer_at(:'k_drift_w', 'starting') o \gset k_drift_
reset role;
select ql.run_cancel_intent(:'k_claim_r', 'user', 'user', null, ql.now_ms()) as seq \gset
select ql.run_cancel_intent(:'k_drift_r', 'user', 'user', null, ql.now_ms() + 1) as seq \gset
select pg_temp.age_attempt(:'k_drift_o', 60000);
update ql.runs set status = 'lost' where id = :'k_drift_r';
select pg_temp.state() as before \gset
set local role ql_scheduler;
select ql_api.run_cancellation_converge_v1(10) as res \gset
reset role;
select is(:'res'::jsonb, pg_temp.page(2, '[]', jsonb_build_array(:'k_claim_r', :'k_drift_r')),
  'a claimed Attempt with an active Lease and a starting Attempt are reported blocked, nothing converged');
select is(pg_temp.state(), :'before', 'blocked Runs: nothing changed (no event, no version, no Attempt end)');
select is((select a.status::text from ql.run_attempts a where a.id = :'k_claim_a'), 'claimed',
  'the Worker still holds its claimed Attempt');

-- The Worker keeps renewing: it is told to stop, and the Run stays blocked while the Lease lives.
set local role ql_runtime;
select pg_temp.lease(:'k_claim_w', :'k_claim_s', :'k_claim_o', 1) ->> 'status' as k_lease \gset
reset role;
select is(:'k_lease'::text, 'stop_requested', 'the Worker holding the claim learns of the intent through lease control');
set local role ql_scheduler;
select ql_api.run_cancellation_converge_v1(10) as res \gset
reset role;
select is(:'res'::jsonb, pg_temp.page(2, '[]', jsonb_build_array(:'k_claim_r', :'k_drift_r')),
  'with the Lease renewed, both stay blocked');

-- Once the claim's Lease is no longer active, the same Run converges; the starting Attempt stays blocked.
select pg_temp.age_attempt(:'k_claim_o', 31000);
select r.cancel_requested_at_ms as k_at, (select pg_temp.run_image(:'k_drift_r')) as k_drift_img from ql.runs r where r.id = :'k_claim_r' \gset
set local role ql_scheduler;
select ql_api.run_cancellation_converge_v1(10) as res \gset
reset role;
select is(:'res'::jsonb, pg_temp.page(2, jsonb_build_array(:'k_claim_r'), jsonb_build_array(:'k_drift_r')),
  'after the claim''s Lease expired it converges; the starting Attempt is still blocked');
select results_eq(format($$select e.type, e.actor_kind::text, e.event_id from ql.run_events e
                            where e.run_id = %L and e.type in ('attempt.cancelled', 'run.cancelled') order by e.sequence$$, :'k_claim_r'),
  format($$values ('attempt.cancelled'::text, 'reconciler'::text, pg_temp.sha_id('ql.converge.attempt', %1$L, %2$L, %3$s)),
                  ('run.cancelled', 'reconciler', pg_temp.sha_id('ql.converge.run', %1$L, %2$L, %3$s))$$,
         :'k_claim_r', :'k_claim_a', :k_at),
  'the formerly blocked claim ends with the same two reconciler events and stable ids');
select ok(pg_temp.stream_ok(:'k_claim_r') and pg_temp.run_row(:'k_claim_r') ~ '^\(cancelled,',
  'the formerly blocked Run is cancelled with a contiguous stream');
select is(pg_temp.run_image(:'k_drift_r'), :'k_drift_img', 'the starting Attempt''s Run is never faked to an end');

-- ---------------------------------------------------------------------------------------------
-- After every pass above: the Runs convergence must not touch are exactly as they were.
select is(pg_temp.run_image(:'n_plain') || pg_temp.run_image(:'n_claim_r') || pg_temp.run_image(:'n_retry'), :'img_no_intent',
  'Runs without an intent are never touched (queued, an expired claim, retry_wait)');
select is(pg_temp.run_image(:'n_cancelled_r') || pg_temp.run_image(:'n_ok_r'), :'img_terminal',
  'terminal Runs are never touched, even one that carries an intent');
select is(pg_temp.run_image(:'b_starting_r') || pg_temp.run_image(:'b_running_r'), :'img_running',
  'running Runs with intents (starting, and running with an expired Lease) are never touched');
select ok((select count(*) = 0 from ql.run_events e
            where e.actor_kind = 'reconciler' and e.run_id in (:'n_plain', :'n_claim_r', :'n_retry', :'n_cancelled_r', :'n_ok_r',
                                                               :'b_starting_r', :'b_running_r')),
  'no reconciler event was ever written for them');
select is((select count(*) from ql.run_events e where e.actor_kind = 'reconciler'), 16::bigint,
  'reconciler events in all: 2 + 2 (claims ended: user, timeout) + 1 (lost) + 1 (queued) + 3 (created, waiting, retry_wait) + 5 (paging) + 2 (the unblocked claim)');
select is((select count(*) from ql.run_events e group by e.event_id order by 1 desc limit 1), 1::bigint,
  'no event id was written twice');

-- ---------------------------------------------------------------------------------------------
-- A blocked Run never starves a convergeable one: Runs no Attempt holds come first in every page.
select pg_temp.mk_scenario() as s_block_w \gset
select o, o ->> 'runId' as r from pg_temp.offer_at(:'s_block_w', 'claimed') o \gset s_block_
select ql.run_cancel_intent(:'s_block_r', 'user', 'user', null, ql.now_ms() - 60000);
select pg_temp.mk_run(pg_temp.mk_revision(pg_temp.mk_project())) as s_free \gset
select ql.run_cancel_intent(:'s_free', 'user', 'user', null, ql.now_ms());
set local role ql_scheduler;
select ql_api.run_cancellation_converge_v1(1) as s_page \gset
reset role;
select is(:'s_page'::jsonb -> 'convergedRunIds', jsonb_build_array(:'s_free'),
  'with an older blocked claim and a page of one, the free Run is converged first');
set local role ql_scheduler;
select is(ql_api.run_cancellation_converge_v1(1) -> 'blockedRunIds', jsonb_build_array(:'s_block_r'),
  'only then is the held Run reported blocked');
reset role;

select * from finish();
rollback;
