-- Tests ql_api.lease_expiry_reconcile_v1: expired claims abandoned and offered again, started Attempts lost after
-- expiry + grace, and the retry authority (retry_wait with backoff, failed when spent, due retry_wait requeued);
-- an intent always wins over a retry (docs/architecture.md §4 item 9, decision 0000 (ADR-0118 §7)).
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(78);

-- Everything stored about one Run (its row, Attempts, Leases, Offers, events), to prove "nothing changed for it".
create function pg_temp.run_image(p_run uuid) returns text language sql
return (select string_agg(t, E'\n' order by t) from (
  select 'run ' || r::text as t from ql.runs r where r.id = p_run union all
  select 'attempt ' || a::text from ql.run_attempts a where a.run_id = p_run union all
  select 'lease ' || l::text from ql.run_leases l join ql.run_attempts a on a.id = l.attempt_id where a.run_id = p_run union all
  select 'event ' || e::text from ql.run_events e where e.run_id = p_run) q);

-- An ok result with exact counts.
create function pg_temp.counts(p_scanned int, p_abandoned int, p_lost int, p_retry int, p_failed int, p_requeued int)
returns jsonb language sql
return jsonb_build_object('status', 'ok', 'scanned', p_scanned, 'abandoned', p_abandoned, 'lost', p_lost,
                          'retryScheduled', p_retry, 'failed', p_failed, 'requeued', p_requeued);

-- The events of a Run after sequence p_after, as a jsonb array of [sequence, type, actor, attempt, payload].
create function pg_temp.events_after(p_run uuid, p_after bigint) returns jsonb language sql
return (select coalesce(jsonb_agg(jsonb_build_array(e.sequence, e.type, e.actor_kind, e.attempt_id, e.payload) order by e.sequence), '[]')
          from ql.run_events e where e.run_id = p_run and e.sequence > p_after);

-- ---------------------------------------------------------------------------------------------
-- Structure: a page function of the scheduler, SECURITY DEFINER, not callable by the shell's role.
select has_function('ql_api', 'lease_expiry_reconcile_v1', array['integer', 'bigint'],
  'lease-expiry recovery exists with typed limit and grace parameters');
select is_definer('ql_api', 'lease_expiry_reconcile_v1', array['integer', 'bigint'],
  'lease-expiry recovery is SECURITY DEFINER');
select function_returns('ql_api', 'lease_expiry_reconcile_v1', array['integer', 'bigint'], 'jsonb',
  'lease-expiry recovery answers a jsonb result');
select is((select p.proconfig from pg_proc p where p.oid = 'ql_api.lease_expiry_reconcile_v1(integer, bigint)'::regprocedure),
  array['search_path=pg_catalog, pg_temp'], 'lease-expiry recovery pins search_path to pg_catalog, pg_temp');
select function_privs_are('ql_api', 'lease_expiry_reconcile_v1', array['integer', 'bigint'],
  'ql_scheduler', array['EXECUTE'], 'the scheduler role (pg_cron) may execute lease-expiry recovery');
select function_privs_are('ql_api', 'lease_expiry_reconcile_v1', array['integer', 'bigint'],
  'ql_runtime', array[]::text[], 'the runtime role (the shell) may not execute lease-expiry recovery');
select function_privs_are('ql_api', 'lease_expiry_reconcile_v1', array['integer', 'bigint'],
  'public', array[]::text[], 'PUBLIC may not execute lease-expiry recovery');
set local role ql_runtime;
select throws_ok('select ql_api.lease_expiry_reconcile_v1(1, 0)', '42501',
  'permission denied for function lease_expiry_reconcile_v1', 'the runtime role calling lease-expiry recovery is refused');
reset role;

-- ---------------------------------------------------------------------------------------------
-- Runs recovery must leave alone, checked along the way:
--   u_claim: claimed with a live Lease; u_running: running whose Lease expired a second ago (less than grace);
--   u_starting: starting with a live Lease; u_plain: queued, no Attempt; u_done: succeeded.
select pg_temp.mk_run(pg_temp.mk_revision(pg_temp.mk_project())) as u_plain \gset
select pg_temp.mk_scenario() as u_claim_w, pg_temp.mk_scenario() as u_running_w, pg_temp.mk_scenario() as u_starting_w,
       pg_temp.mk_scenario() as u_done_w \gset
set local role ql_runtime;
select o, o ->> 'runId' as r from pg_temp.offer_at(:'u_claim_w', 'claimed') o \gset u_claim_
select o, o ->> 'runId' as r, o ->> 'attemptId' as a from pg_temp.offer_at(:'u_running_w', 'running') o \gset u_running_
select o, o ->> 'runId' as r from pg_temp.offer_at(:'u_starting_w', 'starting') o \gset u_starting_
select o, o ->> 'runId' as r, o ->> 'sessionId' as s from pg_temp.offer_at(:'u_done_w', 'running') o \gset u_done_
select pg_temp.complete(:'u_done_w', :'u_done_s', :'u_done_o', 1, 0) ->> 'status' as done \gset
reset role;
select pg_temp.age_attempt(:'u_running_o', 31000);   -- the Lease (30 s from the claim) expired a second ago
select pg_temp.age_attempt(:'u_done_o', 70000);      -- a finished Attempt's old Lease is nobody's business
select pg_temp.run_image(:'u_claim_r') as img_claim, pg_temp.run_image(:'u_running_r') as img_running,
       pg_temp.run_image(:'u_starting_r') || pg_temp.run_image(:'u_plain') || pg_temp.run_image(:'u_done_r') as img_others \gset
select ok((select l.expires_at_ms < ql.now_ms() and l.expires_at_ms > ql.now_ms() - 30000
             from ql.run_leases l where l.attempt_id = :'u_running_a'),
  'setup: the running Attempt''s Lease has expired, less than the 30 s grace ago');

-- An idle pass.
select pg_temp.state() as before \gset
set local role ql_scheduler;
select ql_api.lease_expiry_reconcile_v1(10, 30000) as res \gset
reset role;
select is(:'res'::jsonb, pg_temp.counts(0, 0, 0, 0, 0, 0),
  'an idle pass scans nothing: live claims, a started Attempt within its grace and finished Runs are not candidates');
select is(pg_temp.state(), :'before', 'an idle pass writes nothing');

-- ---------------------------------------------------------------------------------------------
-- Expired claims: a_old (expired 20 s ago) and a_new (expired 10 s ago).
select pg_temp.mk_scenario() as a_old_w, pg_temp.mk_scenario() as a_new_w \gset
set local role ql_runtime;
select o, o ->> 'runId' as r, o ->> 'attemptId' as a, o ->> 'sessionId' as s from pg_temp.offer_at(:'a_old_w', 'claimed') o \gset a_old_
select o, o ->> 'runId' as r, o ->> 'attemptId' as a, o ->> 'sessionId' as s from pg_temp.offer_at(:'a_new_w', 'claimed') o \gset a_new_
reset role;
select pg_temp.age_attempt(:'a_old_o', 50000);
select pg_temp.age_attempt(:'a_new_o', 40000);

-- Invalid limit and grace, while work waits: each call would otherwise write.
select pg_temp.state() as before \gset
set local role ql_scheduler;
select ql_api.lease_expiry_reconcile_v1(0, 30000) as l0, ql_api.lease_expiry_reconcile_v1(129, 30000) as l129,
       ql_api.lease_expiry_reconcile_v1(null, 30000) as lnull, ql_api.lease_expiry_reconcile_v1(10, -1) as gneg,
       ql_api.lease_expiry_reconcile_v1(10, 86400001) as gbig, ql_api.lease_expiry_reconcile_v1(10, null) as gnull,
       ql_api.lease_expiry_reconcile_v1(null, null) as both \gset
reset role;
select is(:'l0'::jsonb, '{"status": "invalid", "reason": "limit"}', 'limit 0 is invalid');
select is(:'l129'::jsonb, '{"status": "invalid", "reason": "limit"}', 'limit 129 is invalid (a page is at most 128)');
select is(:'lnull'::jsonb, '{"status": "invalid", "reason": "limit"}', 'a NULL limit is invalid');
select is(:'gneg'::jsonb, '{"status": "invalid", "reason": "grace_ms"}', 'a negative grace is invalid');
select is(:'gbig'::jsonb, '{"status": "invalid", "reason": "grace_ms"}', 'a grace above one day (86400000 ms) is invalid');
select is(:'gnull'::jsonb, '{"status": "invalid", "reason": "grace_ms"}', 'a NULL grace is invalid');
select is(:'both'::jsonb, '{"status": "invalid", "reason": "limit"}', 'the limit is checked first');
select is(pg_temp.state(), :'before', 'invalid limit or grace: refused and nothing changed');

-- limit 1: exactly one, the oldest expiry first.
select r.version as a_old_version, r.event_sequence as a_old_seq, r.queued_at_ms as a_old_queued,
       (select l.expires_at_ms from ql.run_leases l where l.attempt_id = :'a_old_a') as a_old_expiry,
       pg_temp.run_image(:'a_new_r') as a_new_img, ql.now_ms() as t0
  from ql.runs r where r.id = :'a_old_r' \gset
set local role ql_scheduler;
select ql_api.lease_expiry_reconcile_v1(1, 30000) as res \gset
reset role;
select ql.now_ms() as t1 \gset
select is(:'res'::jsonb, pg_temp.counts(1, 1, 0, 0, 0, 0), 'limit 1: one expired claim is abandoned, scanned 1');
select results_eq(format($$select a.status::text, a.version, a.ended_at_ms between %s and %s from ql.run_attempts a where a.id = %L$$,
                         :t0, :t1, :'a_old_a'),
  $$values ('abandoned'::text, 2::bigint, true)$$,
  'the oldest expired claim is abandoned (version +1), ended at database time of the pass');
select results_eq(format($$select r.status::text, r.version, r.event_sequence, r.current_attempt_id, r.attempt_count,
                                  r.queued_at_ms::bigint, r.ended_at_ms::bigint from ql.runs r where r.id = %L$$, :'a_old_r'),
  format($$values ('queued'::text, %s::bigint, %s::bigint, null::uuid, 1, %s::bigint, null::bigint)$$,
         :a_old_version + 1, :a_old_seq + 1, :a_old_queued),
  'the Run stays queued, holds no Attempt, keeps its place in the queue, and moves one version with one event');
select is(pg_temp.events_after(:'a_old_r', :a_old_seq),
  jsonb_build_array(jsonb_build_array(:a_old_seq + 1, 'attempt.abandoned', 'reconciler', :'a_old_a',
                                      jsonb_build_object('attemptNo', 1, 'leaseExpiredAtMs', :a_old_expiry))),
  'one attempt.abandoned event by the reconciler, naming the Attempt and when its Lease expired');
select ok(pg_temp.stream_ok(:'a_old_r'), 'the abandoned Run''s stream stays contiguous');
select is(pg_temp.run_image(:'a_new_r'), :'a_new_img', 'beyond the limit, the newer expired claim is untouched');

-- The largest bounds (128, one day of grace): the remaining claim is abandoned — a claim has no grace.
set local role ql_scheduler;
select ql_api.lease_expiry_reconcile_v1(128, 86400000) as res \gset
reset role;
select is(:'res'::jsonb, pg_temp.counts(1, 1, 0, 0, 0, 0),
  'limit 128 and grace 86400000 are valid; an expired claim is abandoned whatever the grace (it never started)');
select is((select a.status::text from ql.run_attempts a where a.id = :'a_new_a'), 'abandoned', 'the newer claim is abandoned too');
select is(pg_temp.run_image(:'u_running_r'), :'img_running',
  'with a day of grace, the running Attempt whose Lease expired is untouched');

-- Offered again on the next pull: Attempt 2 under lease generation 2.
set local role ql_runtime;
select pg_temp.pull(:'a_old_w', :'a_old_s', 'token-2') as a_old_o2 \gset
reset role;
select results_eq(format($$select (%1$L::jsonb ->> 'runId')::uuid, (%1$L::jsonb ->> 'attemptNo')::int,
                                  (%1$L::jsonb ->> 'leaseGeneration')::bigint, (%1$L::jsonb ->> 'leaseVersion')::bigint$$, :'a_old_o2'),
  format($$values (%L::uuid, 2, 2::bigint, 1::bigint)$$, :'a_old_r'),
  'the abandoned Run is offered again on the next pull: attempt_no 2, lease generation 2, lease version 1');
select results_eq(format($$select a.attempt_no, a.status::text from ql.run_attempts a where a.run_id = %L order by a.attempt_no$$, :'a_old_r'),
  $$values (1, 'abandoned'::text), (2, 'claimed')$$,
  'the Run now has the abandoned Attempt 1 and the claimed Attempt 2');
select is((select r.current_attempt_id::text from ql.runs r where r.id = :'a_old_r'), :'a_old_o2'::jsonb ->> 'attemptId',
  'the new claim holds the Run');
select ok(pg_temp.stream_ok(:'a_old_r'), 'the re-offered Run''s stream stays contiguous');

-- ---------------------------------------------------------------------------------------------
-- Started Attempts past expiry + grace: d (running, maxAttempts 3, backoff 60 s) and e (starting, default plan).
select pg_temp.mk_scenario('{"argv": ["true"], "maxAttempts": 3, "retryBackoffMs": 60000}') as d_w,
       pg_temp.mk_scenario() as e_w \gset
set local role ql_runtime;
select o, o ->> 'runId' as r, o ->> 'attemptId' as a, o ->> 'sessionId' as s from pg_temp.offer_at(:'d_w', 'running') o \gset d_
select o, o ->> 'runId' as r, o ->> 'attemptId' as a from pg_temp.offer_at(:'e_w', 'starting') o \gset e_
reset role;
select pg_temp.age_attempt(:'d_o', 70000);   -- Lease expired 40 s ago: more than the 30 s grace
select pg_temp.age_attempt(:'e_o', 70000);
select (select r.event_sequence from ql.runs r where r.id = :'d_r') as d_seq,
       (select r.event_sequence from ql.runs r where r.id = :'e_r') as e_seq, ql.now_ms() as t0 \gset
set local role ql_scheduler;
select ql_api.lease_expiry_reconcile_v1(10, 30000) as res \gset
reset role;
select ql.now_ms() as t1 \gset
select is(:'res'::jsonb, pg_temp.counts(4, 0, 2, 1, 1, 0),
  'two started Attempts past grace: scanned 2 + 2 (step 1, step 2), lost 2, then one retry scheduled and one failed');
select is((select array_agg(a.status::text || ':' || (a.ended_at_ms between :t0 and :t1)::text order by a.id = :'d_a' desc)
             from ql.run_attempts a where a.id in (:'d_a', :'e_a')),
  array['lost:true', 'lost:true'], 'both the running and the starting Attempt are lost, ended at database time');
select is((select jsonb_agg(x -> 1) from jsonb_array_elements(pg_temp.events_after(:'d_r', :d_seq)) x),
  '["attempt.lost", "run.lost", "run.retry_scheduled"]'::jsonb,
  'maxAttempts allows another: attempt.lost, run.lost, run.retry_scheduled, in that order');
select is(pg_temp.events_after(:'d_r', :d_seq),
  (select jsonb_build_array(
            jsonb_build_array(:d_seq + 1, 'attempt.lost', 'reconciler', :'d_a', jsonb_build_object('attemptNo', 1, 'leaseExpiredAtMs', l.expires_at_ms)),
            jsonb_build_array(:d_seq + 2, 'run.lost', 'reconciler', :'d_a', '{"attemptNo": 1}'::jsonb),
            jsonb_build_array(:d_seq + 3, 'run.retry_scheduled', 'reconciler', null,
                              jsonb_build_object('status', 'retry_wait', 'retryAtMs', r.retry_at_ms, 'from', 'lost')))
     from ql.run_leases l, ql.runs r where l.attempt_id = :'d_a' and r.id = :'d_r'),
  'the three reconciler events carry the Attempt, its Lease expiry and the retry time, at contiguous sequences');
select results_eq(format($$select r.status::text, r.current_attempt_id, r.ended_at_ms::bigint,
                                  r.retry_at_ms - (select e.occurred_at_ms from ql.run_events e where e.run_id = r.id and e.type = 'run.retry_scheduled')
                             from ql.runs r where r.id = %L$$, :'d_r'),
  $$values ('retry_wait'::text, null::uuid, null::bigint, 60000::bigint)$$,
  'the Run waits in retry_wait with retry_at = now + retryBackoffMs exactly (now = the event''s database time), not ended');
select ok((select r.retry_at_ms between :t0 + 60000 and :t1 + 60000 from ql.runs r where r.id = :'d_r'),
  'retry_at is database time of this pass + 60 s');
select is((select jsonb_agg(x -> 1) from jsonb_array_elements(pg_temp.events_after(:'e_r', :e_seq)) x),
  '["attempt.lost", "run.lost", "run.failed"]'::jsonb,
  'maxAttempts (default 1) spent: attempt.lost, run.lost, run.failed, in that order');
select results_eq(format($$select r.status::text, r.retry_at_ms::bigint, r.ended_at_ms = e.occurred_at_ms, e.payload, e.actor_kind::text
                             from ql.runs r join ql.run_events e on e.run_id = r.id and e.type = 'run.failed' where r.id = %L$$, :'e_r'),
  $$values ('failed'::text, null::bigint, true, '{"status": "failed", "from": "lost"}'::jsonb, 'reconciler'::text)$$,
  'the Run ends failed: ended_at set to the event''s time, no retry time, by the reconciler');
select ok(pg_temp.stream_ok(:'d_r') and pg_temp.stream_ok(:'e_r'), 'both streams stay contiguous: every event bumped the version once');
select is(pg_temp.run_image(:'u_running_r'), :'img_running', 'the running Attempt still within its grace is untouched');
select is(pg_temp.run_image(:'u_claim_r'), :'img_claim', 'the claim with a live Lease is untouched');

-- Not yet due: a second pass leaves the retry_wait Run alone.
select pg_temp.state() as before \gset
set local role ql_scheduler;
select ql_api.lease_expiry_reconcile_v1(10, 30000) as res \gset
reset role;
select is(:'res'::jsonb, pg_temp.counts(0, 0, 0, 0, 0, 0), 'a retry_wait Run whose retry_at is still ahead is not a candidate');
select is(pg_temp.state(), :'before', 'not-yet-due retry_wait: nothing changed');

-- Due: requeued and offerable again.
update ql.runs set retry_at_ms = ql.now_ms() - 1 where id = :'d_r';
select r.event_sequence as d_seq, r.version as d_version, r.queued_at_ms as d_queued_before, ql.now_ms() as t0
  from ql.runs r where r.id = :'d_r' \gset
set local role ql_scheduler;
select ql_api.lease_expiry_reconcile_v1(10, 30000) as res \gset
reset role;
select ql.now_ms() as t1 \gset
select is(:'res'::jsonb, pg_temp.counts(1, 0, 0, 0, 0, 1), 'a due retry_wait Run is requeued: scanned 1, requeued 1');
select results_eq(format($$select r.status::text, r.version, r.retry_at_ms::bigint, r.queued_at_ms = e.occurred_at_ms,
                                  r.queued_at_ms > %s, e.occurred_at_ms between %s and %s
                             from ql.runs r join ql.run_events e on e.run_id = r.id and e.sequence = r.event_sequence where r.id = %L$$,
                         :d_queued_before, :t0, :t1, :'d_r'),
  format($$values ('queued'::text, %s::bigint, null::bigint, true, true, true)$$, :d_version + 1),
  'the Run is queued (one version), retry_at cleared, queued_at moved to the requeue''s database time');
select is(pg_temp.events_after(:'d_r', :d_seq),
  jsonb_build_array(jsonb_build_array(:d_seq + 1, 'run.requeued', 'reconciler', null, '{"attemptCount": 1}'::jsonb)),
  'one run.requeued event by the reconciler with the Attempts spent so far');
set local role ql_runtime;
select pg_temp.pull(:'d_w', :'d_s', 'token-2') as d_o2 \gset
reset role;
select results_eq(format($$select (%1$L::jsonb ->> 'runId')::uuid, (%1$L::jsonb ->> 'attemptNo')::int, (%1$L::jsonb ->> 'leaseGeneration')::bigint$$, :'d_o2'),
  format($$values (%L::uuid, 2, 2::bigint)$$, :'d_r'),
  'the requeued Run is offerable: the next pull offers Attempt 2 under lease generation 2');
select ok(pg_temp.stream_ok(:'d_r'), 'the retried Run''s stream stays contiguous');

-- ---------------------------------------------------------------------------------------------
-- An intent wins over a retry: g (running, maxAttempts 3, user intent) past expiry + grace, and h (retry_wait, due,
-- maxAttempts 3, user intent). Without their intents g would be retried and h requeued.
select pg_temp.mk_scenario('{"argv": ["true"], "maxAttempts": 3}') as g_w \gset
set local role ql_runtime;
select o, o ->> 'runId' as r, o ->> 'attemptId' as a from pg_temp.offer_at(:'g_w', 'running') o \gset g_
reset role;
select pg_temp.mk_run(pg_temp.mk_revision(pg_temp.mk_project(), '{"argv": ["true"], "maxAttempts": 3}')) as h_r, ql.now_ms() as it \gset
update ql.runs set status = 'retry_wait', retry_at_ms = :it - 1000 where id = :'h_r';
select ql.run_cancel_intent(:'g_r', 'user', 'user', null, :it - 200) as g_iseq \gset
select ql.run_cancel_intent(:'h_r', 'user', 'user', null, :it - 100) as h_iseq \gset
select pg_temp.age_attempt(:'g_o', 70000);
select pg_temp.run_image(:'h_r') as h_img, (select r.event_sequence from ql.runs r where r.id = :'g_r') as g_seq \gset
set local role ql_scheduler;
select ql_api.lease_expiry_reconcile_v1(10, 30000) as res \gset
reset role;
select is(:'res'::jsonb, pg_temp.counts(1, 0, 1, 0, 0, 0),
  'with intents: the expired running Attempt is still lost (step 1), but no retry and no requeue (step 2 skips intents)');
select is((select jsonb_agg(x -> 1) from jsonb_array_elements(pg_temp.events_after(:'g_r', :g_seq)) x),
  '["attempt.lost", "run.lost"]'::jsonb, 'the Run with an intent gets attempt.lost and run.lost, and no run.retry_scheduled');
select results_eq(format($$select r.status::text, r.retry_at_ms::bigint, r.ended_at_ms::bigint, r.cancel_reason::text from ql.runs r where r.id = %L$$, :'g_r'),
  $$values ('lost'::text, null::bigint, null::bigint, 'user'::text)$$,
  'it stays lost (not terminal) with its intent, for convergence');
select is(pg_temp.run_image(:'h_r'), :'h_img', 'the due retry_wait Run with an intent is not requeued: nothing changed for it');
select pg_temp.state() as before \gset
set local role ql_scheduler;
select ql_api.lease_expiry_reconcile_v1(10, 30000) as res \gset
reset role;
select is(:'res'::jsonb, pg_temp.counts(0, 0, 0, 0, 0, 0), 'the next pass does not pick them up either');
select is(pg_temp.state(), :'before', 'an intent wins over a retry on every pass: nothing changed');

-- Convergence is the one that ends them.
select (select r.event_sequence from ql.runs r where r.id = :'g_r') as g_seq, (select r.event_sequence from ql.runs r where r.id = :'h_r') as h_seq \gset
set local role ql_scheduler;
select ql_api.run_cancellation_converge_v1(10) as conv \gset
reset role;
select is(:'conv'::jsonb, jsonb_build_object('status', 'ok', 'scanned', 2, 'converged', 2, 'blocked', 0,
                                            'convergedRunIds', jsonb_build_array(:'g_r', :'h_r'), 'blockedRunIds', '[]'::jsonb),
  'cancellation convergence converges both, oldest intent first');
select is(pg_temp.events_after(:'g_r', :g_seq),
  jsonb_build_array(jsonb_build_array(:g_seq + 1, 'run.cancelled', 'reconciler', null,
                                      '{"status": "cancelled", "reason": "user", "from": "lost"}'::jsonb)),
  'the lost Run (its Attempt already lost) is cancelled with one run.cancelled event');
select is(pg_temp.events_after(:'h_r', :h_seq),
  jsonb_build_array(jsonb_build_array(:h_seq + 1, 'run.cancelled', 'reconciler', null,
                                      '{"status": "cancelled", "reason": "user", "from": "retry_wait"}'::jsonb)),
  'the retry_wait Run is cancelled with one run.cancelled event, never requeued');
select ok((select bool_and(r.status = 'cancelled' and r.ended_at_ms is not null and pg_temp.stream_ok(r.id))
             from ql.runs r where r.id in (:'g_r', :'h_r')),
  'both are cancelled and ended, their streams contiguous');
select pg_temp.state() as before \gset
set local role ql_scheduler;
select ql_api.lease_expiry_reconcile_v1(10, 30000) as res \gset
reset role;
select is(:'res'::jsonb, pg_temp.counts(0, 0, 0, 0, 0, 0), 'once cancelled, recovery has nothing to do for them');
select is(pg_temp.state(), :'before', 'and writes nothing');

-- ---------------------------------------------------------------------------------------------
-- The Runs to leave alone are as they were, then the grace is what held the running one: with grace 0 it is lost.
select is(pg_temp.run_image(:'u_claim_r'), :'img_claim', 'the claim with a live Lease was never touched');
select is(pg_temp.run_image(:'u_running_r'), :'img_running', 'the running Attempt within its grace was never touched');
select is(pg_temp.run_image(:'u_starting_r') || pg_temp.run_image(:'u_plain') || pg_temp.run_image(:'u_done_r'), :'img_others',
  'a live starting Attempt, a queued Run without Attempt and a succeeded Run (with an old expired Lease) were never touched');
select r.event_sequence as u_seq from ql.runs r where r.id = :'u_running_r' \gset
set local role ql_scheduler;
select ql_api.lease_expiry_reconcile_v1(10, 0) as res \gset
reset role;
select is(:'res'::jsonb, pg_temp.counts(2, 0, 1, 0, 1, 0),
  'grace 0: the running Attempt whose Lease expired is lost at once, and its Run (maxAttempts 1) fails in the same call');
select is((select jsonb_agg(x -> 1) from jsonb_array_elements(pg_temp.events_after(:'u_running_r', :u_seq)) x),
  '["attempt.lost", "run.lost", "run.failed"]'::jsonb, 'attempt.lost, run.lost, run.failed');
select is(pg_temp.run_image(:'u_claim_r'), :'img_claim', 'even with grace 0, a claim whose Lease lives is untouched');
select is((select count(*) from ql.run_events e where e.actor_kind = 'reconciler'
             and e.run_id in (:'u_claim_r', :'u_starting_r', :'u_plain', :'u_done_r')), 0::bigint,
  'no reconciler event was ever written for a live or finished Run');

-- ---------------------------------------------------------------------------------------------
-- A Run whose claims were abandoned 100 times fails (attempt_no is 1..100), instead of never being offered.
select pg_temp.mk_scenario() as x_w \gset
select o, o ->> 'runId' as r from pg_temp.offer_at(:'x_w', 'claimed') o \gset x_
update ql.runs set attempt_count = 100 where id = :'x_r';
select pg_temp.age_attempt(:'x_o', 600000);
set local role ql_scheduler;
select ql_api.lease_expiry_reconcile_v1(128, 0) as x_page \gset
reset role;
select is((select (status, ended_at_ms is not null)::text from ql.runs where id = :'x_r'), '(failed,t)',
  'after 100 abandoned claims the Run ends failed');
select is((select payload from ql.run_events where run_id = :'x_r' order by sequence desc limit 1),
  '{"reason": "claims_exhausted"}'::jsonb, 'its last event says why: claims_exhausted');

-- ---------------------------------------------------------------------------------------------
-- A deadline that came while the Lease still held: the Run overran its timeout even though no renewal
-- arrived to say so. t (timeoutMs 1 s, maxAttempts 2) gets the timeout intent with its loss and ends
-- timed_out, never retried; l (timeoutMs 1 h: its Lease expired first) is an ordinary loss and retries.
select pg_temp.mk_scenario('{"argv": ["true"], "timeoutMs": 1000, "maxAttempts": 2}') as t_w,
       pg_temp.mk_scenario('{"argv": ["true"], "timeoutMs": 3600000, "maxAttempts": 2}') as l_w \gset
set local role ql_runtime;
select o, o ->> 'runId' as r, o ->> 'attemptId' as a from pg_temp.offer_at(:'t_w', 'running') o \gset t_
select o, o ->> 'runId' as r, o ->> 'attemptId' as a from pg_temp.offer_at(:'l_w', 'running') o \gset l_
reset role;
select pg_temp.age_attempt(:'t_o', 3700000);
select pg_temp.age_attempt(:'l_o', 3700000);
select ok((select a.deadline_at_ms <= l.expires_at_ms from ql.run_attempts a join ql.run_leases l on l.attempt_id = a.id
            where a.id = :'t_a')
          and (select a.deadline_at_ms > l.expires_at_ms from ql.run_attempts a join ql.run_leases l on l.attempt_id = a.id
                where a.id = :'l_a'),
  'set-up: t''s deadline came before its Lease expired, l''s after');
select (select r.event_sequence from ql.runs r where r.id = :'t_r') as t_seq \gset
set local role ql_scheduler;
select ql_api.lease_expiry_reconcile_v1(128, 30000) as res \gset
reset role;
select is(:'res'::jsonb, pg_temp.counts(3, 0, 2, 1, 0, 0),
  'both are lost; only l (no intent) gets a retry, t is left to convergence');
select is((select jsonb_agg(x -> 1) from jsonb_array_elements(pg_temp.events_after(:'t_r', :t_seq)) x),
  '["attempt.lost", "run.lost", "run.cancel_requested"]'::jsonb,
  't: attempt.lost, run.lost, then the timeout intent, in that order');
select results_eq(format($$select r.status::text, r.cancel_reason::text, e.actor_kind::text, e.payload ->> 'reason'
                             from ql.runs r join ql.run_events e on e.run_id = r.id and e.type = 'run.cancel_requested'
                            where r.id = %L$$, :'t_r'),
  $$values ('lost'::text, 'timeout'::text, 'reconciler'::text, 'timeout'::text)$$,
  't stays lost with the intent reason timeout, written by the reconciler');
select is((select r.status::text || ':' || coalesce(r.cancel_reason::text, '-') from ql.runs r where r.id = :'l_r'),
  'retry_wait:-', 'l: an ordinary loss, no intent, waiting for its retry');
set local role ql_scheduler;
select ql_api.run_cancellation_converge_v1(128) as conv \gset
reset role;
select results_eq(format($$select r.status::text, r.ended_at_ms is not null, (select count(*) from ql.run_attempts a where a.run_id = r.id)
                             from ql.runs r where r.id = %L$$, :'t_r'),
  $$values ('timed_out'::text, true, 1::bigint)$$,
  'convergence ends t timed_out after its one Attempt: a timeout is not retried');
select ok(pg_temp.stream_ok(:'t_r') and pg_temp.stream_ok(:'l_r'), 'both streams stay contiguous');

select * from finish();
rollback;
