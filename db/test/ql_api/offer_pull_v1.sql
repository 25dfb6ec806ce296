-- Tests ql_api.offer_pull_v1: offered (shape, rows, events, token digest only), oldest-first, pool, cancel intent, empty, invalid, fences; structure and grants.
begin;
\ir ../fixtures.psql
select plan(101);

-- Structure: one SECURITY DEFINER function, executable by the runtime role and nobody else.
select has_function('ql_api', 'offer_pull_v1', array['uuid', 'uuid', 'bigint', 'bytea', 'uuid'],
  'offer_pull_v1(uuid, uuid, bigint, bytea, uuid) exists');
select is_definer('ql_api', 'offer_pull_v1', array['uuid', 'uuid', 'bigint', 'bytea', 'uuid'],
  'offer_pull_v1 runs as its owner (SECURITY DEFINER)');
select function_returns('ql_api', 'offer_pull_v1', array['uuid', 'uuid', 'bigint', 'bytea', 'uuid'], 'jsonb',
  'offer_pull_v1 returns a typed jsonb result');
select is((select p.proconfig from pg_catalog.pg_proc p
           where p.oid = 'ql_api.offer_pull_v1(uuid, uuid, bigint, bytea, uuid)'::regprocedure),
  array['search_path=pg_catalog, pg_temp'],
  'offer_pull_v1 pins search_path to pg_catalog, pg_temp');
select function_privs_are('ql_api', 'offer_pull_v1', array['uuid', 'uuid', 'bigint', 'bytea', 'uuid'],
  'ql_runtime', array['EXECUTE'], 'the runtime role may execute offer_pull_v1');
select function_privs_are('ql_api', 'offer_pull_v1', array['uuid', 'uuid', 'bigint', 'bytea', 'uuid'],
  'public', array[]::text[], 'PUBLIC may not execute offer_pull_v1');

-- Fixtures. Queue order is set explicitly (queued_at_ms), not by insertion order:
--   r_gpu (pool gpu) -180 s, r_cancel (cancel intent) -120 s, r_old -60 s, r_new -30 s,
--   r_extra (maxAttempts 2) -20 s, r_more -10 s. r_new is inserted before r_old on purpose.
select pg_temp.mk_project() as project \gset
select pg_temp.mk_revision(:'project', '{"argv": ["sleep", "1"], "env": {"MODE": "test"}, "timeoutMs": 5000}') as rev \gset
select pg_temp.mk_revision(:'project', '{"argv": ["true"], "maxAttempts": 2}') as rev_retry \gset
select pg_temp.mk_revision(:'project', '{"argv": ["nvidia-smi"], "pool": "gpu"}') as rev_gpu \gset
select pg_temp.mk_run(:'rev_gpu') as r_gpu \gset
select pg_temp.mk_run(:'rev') as r_cancel \gset
select pg_temp.mk_run(:'rev') as r_new \gset
select pg_temp.mk_run(:'rev') as r_old \gset
select pg_temp.mk_run(:'rev_retry') as r_extra \gset
select pg_temp.mk_run(:'rev') as r_more \gset
select ql.now_ms() as base \gset
update ql.runs set queued_at_ms = :base - 180000 where id = :'r_gpu';
update ql.runs set queued_at_ms = :base - 120000 where id = :'r_cancel';
update ql.runs set queued_at_ms = :base - 60000 where id = :'r_old';
update ql.runs set queued_at_ms = :base - 30000 where id = :'r_new';
update ql.runs set queued_at_ms = :base - 20000 where id = :'r_extra';
update ql.runs set queued_at_ms = :base - 10000 where id = :'r_more';
select ql.run_cancel_intent(:'r_cancel', 'user', 'user', null, ql.now_ms()) as cancel_seq \gset

select pg_temp.mk_worker() as w \gset
select pg_temp.mk_worker() as wc \gset
select pg_temp.mk_worker('gpu') as wg \gset
select pg_temp.mk_worker('idle') as wo \gset
select pg_temp.mk_worker() as wf \gset
select offer_ttl_ms as offer_ttl from ql.settings \gset
select pg_temp.digest('token-a') as tok \gset

set local role ql_runtime;
select pg_temp.open_session(:'w') as s \gset
select pg_temp.open_session(:'wc', 1) as sc \gset
select pg_temp.open_session(:'wg') as sg \gset
select pg_temp.open_session(:'wo') as so \gset
select pg_temp.open_session(:'wf') as sf_old \gset
select pg_temp.open_session(:'wf') as sf \gset
reset role;

-- 1. Invalid input: nothing is claimed although work is queued.
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.offer_pull_v1(null, :'s', 1, :'tok'::bytea),
  '{"status": "invalid", "reason": "worker_id"}'::jsonb, 'a missing worker id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a missing worker id is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.offer_pull_v1(:'w', null, 1, :'tok'::bytea),
  '{"status": "invalid", "reason": "session_id"}'::jsonb, 'a missing session id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a missing session id is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.offer_pull_v1(:'w', :'s', null, :'tok'::bytea),
  '{"status": "invalid", "reason": "worker_generation"}'::jsonb, 'a missing generation is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a missing generation is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.offer_pull_v1(:'w', :'s', 0, :'tok'::bytea),
  '{"status": "invalid", "reason": "worker_generation"}'::jsonb, 'generation 0 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'generation 0 is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.offer_pull_v1(:'w', :'s', -1, :'tok'::bytea),
  '{"status": "invalid", "reason": "worker_generation"}'::jsonb, 'a negative generation is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a negative generation is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.offer_pull_v1(:'w', :'s', 9007199254740992, :'tok'::bytea),
  '{"status": "invalid", "reason": "worker_generation"}'::jsonb, 'generation 2^53 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'generation 2^53 is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.offer_pull_v1(:'w', :'s', 1, null),
  '{"status": "invalid", "reason": "token_digest"}'::jsonb, 'a missing token digest is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a missing token digest is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.offer_pull_v1(:'w', :'s', 1, ''::bytea),
  '{"status": "invalid", "reason": "token_digest"}'::jsonb, 'an empty token digest is invalid');
reset role;
select is(pg_temp.state(), :'before', 'an empty token digest is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.offer_pull_v1(:'w', :'s', 1, substring(:'tok'::bytea from 1 for 31)),
  '{"status": "invalid", "reason": "token_digest"}'::jsonb, 'a 31-byte token digest is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a 31-byte token digest is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.offer_pull_v1(:'w', :'s', 1, :'tok'::bytea || '\x00'::bytea),
  '{"status": "invalid", "reason": "token_digest"}'::jsonb, 'a 33-byte token digest (a raw token, say) is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a 33-byte token digest is invalid and nothing changes');

-- 2. Session fences (worker wf: sf_old was replaced by sf).
set local role ql_runtime;
select is(ql_api.offer_pull_v1(:'wf', gen_random_uuid(), 1, :'tok'::bytea),
  '{"status": "fenced", "reason": "stale_session"}'::jsonb, 'an unknown session is stale');
reset role;
select is(pg_temp.state(), :'before', 'an unknown session is stale and nothing changes');

set local role ql_runtime;
select is(ql_api.offer_pull_v1(:'wf', :'s', 1, :'tok'::bytea),
  '{"status": "fenced", "reason": "stale_session"}'::jsonb, 'another worker''s session is stale for this worker');
reset role;
select is(pg_temp.state(), :'before', 'another worker''s session is stale and nothing changes');

set local role ql_runtime;
select is(ql_api.offer_pull_v1(:'wf', :'sf_old', 1, :'tok'::bytea),
  '{"status": "fenced", "reason": "stale_session"}'::jsonb, 'a replaced session is stale');
reset role;
select is(pg_temp.state(), :'before', 'a replaced session is stale and nothing changes');

set local role ql_runtime;
select is(ql_api.offer_pull_v1(:'wf', :'sf', 2, :'tok'::bytea),
  '{"status": "fenced", "reason": "stale_generation"}'::jsonb, 'a generation other than the session''s is fenced');
reset role;
select is(pg_temp.state(), :'before', 'a stale generation is fenced and nothing changes');

update ql.worker_sessions set expires_at_ms = ql.now_ms() - 1 where id = :'sf';
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.offer_pull_v1(:'wf', :'sf', 1, :'tok'::bytea),
  '{"status": "fenced", "reason": "session_expired"}'::jsonb, 'a live session past its expiry is expired');
reset role;
select is(pg_temp.state(), :'before', 'an expired session is fenced and nothing changes');

-- 3. A worker whose pool has no queued Run.
set local role ql_runtime;
select is(ql_api.offer_pull_v1(:'wo', :'so', 1, :'tok'::bytea),
  '{"status": "empty", "reason": "no_work"}'::jsonb, 'a pool without queued Runs is empty/no_work');
reset role;
select is(pg_temp.state(), :'before', 'no_work changes nothing although other pools have work');

-- 4. The first offer: the oldest queued, offerable Run of the worker's pool.
select ql.now_ms() as t0 \gset
set local role ql_runtime;
select ql_api.offer_pull_v1(:'w', :'s', 1, :'tok'::bytea) as pull1 \gset
reset role;
select ql.now_ms() as t1 \gset
select :'pull1'::jsonb -> 'offer' as o1, :'pull1'::jsonb -> 'offer' ->> 'attemptId' as a1,
       :'pull1'::jsonb -> 'offer' ->> 'offerId' as offer1 \gset

select is(array(select k from jsonb_object_keys(:'pull1'::jsonb) k order by k), array['offer', 'status'],
  'an offered pull answers exactly status and offer');
select is(:'pull1'::jsonb ->> 'status', 'offered', 'a worker with capacity in a pool with work is offered');
select is(array(select k from jsonb_object_keys(:'o1'::jsonb) k order by k),
  array['attemptId', 'attemptNo', 'leaseExpiresAtMs', 'leaseGeneration', 'leaseVersion', 'offerExpiresAtMs',
        'offerId', 'offeredAtMs', 'plan', 'projectId', 'runId'],
  'the offer carries exactly the documented keys (no token, no digest)');
select is(:'o1'::jsonb ->> 'runId', :'r_old',
  'the oldest queued Run of the pool is offered first (older Runs of another pool or with a cancel intent are skipped)');
select is(:'o1'::jsonb ->> 'projectId', :'project', 'the offer names the Run''s Project');
select is(:'o1'::jsonb -> 'plan', (select t.plan_json from ql.task_execution_revisions t where t.id = :'rev'),
  'the offered plan is exactly the pinned revision''s plan_json');
select is(array[:'o1'::jsonb ->> 'attemptNo', :'o1'::jsonb ->> 'leaseGeneration', :'o1'::jsonb ->> 'leaseVersion'],
  array['1', '1', '1'], 'the first Attempt is number 1, with lease generation = attempt number and lease version 1');
select is(:'o1'::jsonb -> 'leaseExpiresAtMs', :'o1'::jsonb -> 'offerExpiresAtMs', 'the Lease expires with the offer');
select ok((:'o1'::jsonb ->> 'offerExpiresAtMs')::bigint between :t0 + :offer_ttl and :t1 + :offer_ttl,
  'the offer expires at database time + offer TTL');
select is((:'o1'::jsonb ->> 'offeredAtMs')::bigint + :offer_ttl, (:'o1'::jsonb ->> 'leaseExpiresAtMs')::bigint,
  'offeredAtMs is the claim''s database time: the Worker''s first local expiry is its send instant + the offer TTL');
select results_eq(
  format('select a.run_id, a.status::text, a.attempt_no, a.worker_id, a.worker_generation, a.offer_id, a.version,
                 a.callback_sequence, a.deadline_at_ms::bigint, a.started_at_ms::bigint, a.ended_at_ms::bigint
            from ql.run_attempts a where a.id = %L', :'a1'),
  format('values (%L::uuid, %L::text, 1, %L::uuid, 1::bigint, %L::uuid, 1::bigint, 0, null::bigint, null::bigint, null::bigint)',
         :'r_old', 'claimed', :'w', :'offer1'),
  'the Attempt is stored claimed, number 1, of this worker generation and offer, version 1, no deadline yet');
select results_eq(
  format('select l.lease_generation, l.token_digest::bytea, l.version, l.renewed_at_ms::bigint, l.expires_at_ms::bigint
            from ql.run_leases l join ql.run_attempts a on a.id = l.attempt_id where l.attempt_id = %L', :'a1'),
  format('select 1::bigint, %L::bytea, 1::bigint, a.claimed_at_ms::bigint, %s::bigint from ql.run_attempts a where a.id = %L',
         :'tok', :'o1'::jsonb ->> 'leaseExpiresAtMs', :'a1'),
  'the Lease stores generation 1, the token''s SHA-256, version 1, renewed at the claim, expiring with the offer');
select results_eq(
  format('select a.id, a.worker_id, a.session_id, a.offer_expires_at_ms::bigint from ql.run_attempts a where a.offer_id = %L', :'offer1'),
  format('values (%L::uuid, %L::uuid, %L::uuid, %s::bigint)', :'a1', :'w', :'s', :'o1'::jsonb ->> 'offerExpiresAtMs'),
  'the Offer is stored for this Attempt, worker and session, with the answered expiry');
select results_eq(
  format('select r.status::text, r.current_attempt_id, r.attempt_count, r.version, r.event_sequence
            from ql.runs r where r.id = %L', :'r_old'),
  format('values (%L::text, %L::uuid, 1, 2::bigint, 1::bigint)', 'queued', :'a1'),
  'the Run stays queued, held by the Attempt, attempt_count 1, its version and sequence unchanged (no event)');
select results_eq(
  format('select e.sequence, e.type, e.actor_kind::text, e.actor_id, e.attempt_id, e.payload, e.dedupe_key
            from ql.run_events e where e.run_id = %L order by e.sequence', :'r_old'),
  format('values (1::bigint, %L::text, %L::text, null::uuid, null::uuid, %L::jsonb, %L::text)',
         'run.queued', 'system', '{}', 'run.queued:' || :'r_old'),
  'the claim writes no event: the Run''s stream is still its run.queued (the Attempt row records the claim)');
select ok(:'pull1' !~ encode(:'tok'::bytea, 'hex') and :'pull1' !~ 'token-a',
  'the offer answer carries neither the token nor its digest');
select ok(not exists (select 1 from ql.run_events e where e.payload::text ~ encode(:'tok'::bytea, 'hex')),
  'no event payload carries the token digest');

-- 5. A claimed Run is not offered twice: the next pull takes the next oldest.
set local role ql_runtime;
select pg_temp.pull(:'w', :'s') as o2 \gset
reset role;
select is(:'o2'::jsonb ->> 'runId', :'r_new', 'a claimed Run is not offered again; the next oldest Run follows');
select is((select count(*)::int from ql.run_attempts a where a.run_id = :'r_old'), 1,
  'the claimed Run still has exactly one Attempt');

-- 6. Capacity: a session of capacity 1 takes one Attempt, then answers at_capacity while work remains.
set local role ql_runtime;
select pg_temp.pull(:'wc', :'sc') as oc \gset
reset role;
select is(:'oc'::jsonb ->> 'runId', :'r_extra', 'a capacity-1 session is offered the next oldest Run');
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.offer_pull_v1(:'wc', :'sc', 1, :'tok'::bytea),
  '{"status": "empty", "reason": "at_capacity"}'::jsonb, 'a full session is empty/at_capacity although a Run is queued');
reset role;
select is(pg_temp.state(), :'before', 'at_capacity changes nothing');

-- 7. The pool drains; a Run with a cancel intent is never offered.
set local role ql_runtime;
select pg_temp.pull(:'w', :'s') as o3 \gset
reset role;
select is(:'o3'::jsonb ->> 'runId', :'r_more', 'the newest offerable Run comes last');
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.offer_pull_v1(:'w', :'s', 1, :'tok'::bytea),
  '{"status": "empty", "reason": "no_work"}'::jsonb, 'once every offerable Run is claimed the pool is empty/no_work');
reset role;
select is(pg_temp.state(), :'before', 'no_work changes nothing');
select results_eq(
  format('select r.status::text, r.current_attempt_id, r.attempt_count, r.cancel_reason::text from ql.runs r where r.id = %L', :'r_cancel'),
  format('values (%L::text, null::uuid, 0, %L::text)', 'queued', 'user'),
  'the queued Run with a cancel intent, older than all others, was never offered');

-- 8. Only the worker's pool: the gpu worker gets the gpu Run, which no default worker took.
set local role ql_runtime;
select is(pg_temp.pull(:'wg', :'sg') ->> 'runId', :'r_gpu', 'a worker is offered the Runs of its own pool only');
reset role;

-- 9. Capacity counts live Attempts only, and a retry's lease generation is its attempt number.
set local role ql_runtime;
select is(pg_temp.activate('start_failure', :'wc', :'sc', :'oc', 'token-a', 'spawn.enoent') -> 'snapshot' ->> 'runStatus',
  'retry_wait', 'a start failure of the capacity-1 session''s Attempt schedules a retry');
reset role;
update ql.runs set status = 'queued', retry_at_ms = null where id = :'r_extra';  -- as the retry authority would
set local role ql_runtime;
select ql_api.offer_pull_v1(:'wc', :'sc', 1, pg_temp.digest('token-b')) -> 'offer' as oc2 \gset
reset role;
select is(array[:'oc2'::jsonb ->> 'runId', :'oc2'::jsonb ->> 'attemptNo', :'oc2'::jsonb ->> 'leaseGeneration'],
  array[:'r_extra', '2', '2'],
  'the freed session is offered the requeued Run as Attempt 2 with lease generation 2');
select results_eq(
  format('select l.lease_generation, l.version, l.token_digest::bytea from ql.run_leases l where l.attempt_id = %L',
         :'oc2'::jsonb ->> 'attemptId'),
  format('values (2::bigint, 1::bigint, %L::bytea)', pg_temp.digest('token-b')),
  'the second Lease is stored with generation 2, version 1 and the new token''s digest');

-- 10. The raw token text reaches nothing the control plane stores.
select ok(pg_temp.state() !~ 'token-a' and pg_temp.state() !~ 'token-b',
  'no stored row contains a raw token');

-- 11. A disabled or re-enrolled Worker gets no new work, even through its still-live session.
select pg_temp.mk_run(:'rev') as r_more \gset
update ql.workers set status = 'disabled' where id = :'wc';
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.offer_pull_v1(:'wc', :'sc', 1, pg_temp.digest('token-c')), '{"status": "fenced", "reason": "worker_disabled"}'::jsonb,
  'a disabled Worker''s live session is fenced');
reset role;
select is(pg_temp.state(), :'before', 'the disabled Worker''s pull changes nothing');
update ql.workers set status = 'active', generation = 2 where id = :'wc';
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.offer_pull_v1(:'wc', :'sc', 1, pg_temp.digest('token-c')), '{"status": "fenced", "reason": "worker_disabled"}'::jsonb,
  'a re-enrolled Worker''s old-generation session is fenced');
reset role;
select is(pg_temp.state(), :'before', 'the old generation''s pull changes nothing');

-- 12. Replay of a lost answer: a pull id that already made an offer claims nothing new.
select pg_temp.mk_worker('replay-pool') as wr \gset
select pg_temp.mk_run(pg_temp.mk_revision(pg_temp.mk_project(), '{"argv": ["true"], "pool": "replay-pool"}')) as rr1 \gset
select pg_temp.mk_run(pg_temp.mk_revision(pg_temp.mk_project(), '{"argv": ["true"], "pool": "replay-pool"}')) as rr2 \gset
update ql.runs set queued_at_ms = queued_at_ms - 1000 where id = :'rr1';  -- rr1 first, even within one ms
select gen_random_uuid() as pid \gset
set local role ql_runtime;
select pg_temp.open_session(:'wr') as sr \gset
select ql_api.offer_pull_v1(:'wr', :'sr', 1, pg_temp.digest('token-r1'), :'pid') as first \gset
reset role;
select pg_temp.state() as before, ql.now_ms() as t0 \gset
set local role ql_runtime;
select ql_api.offer_pull_v1(:'wr', :'sr', 1, pg_temp.digest('token-r2'), :'pid') as again \gset
reset role;
select ql.now_ms() as t1 \gset
select is((:'again'::jsonb -> 'offer') - 'offeredAtMs', (:'first'::jsonb -> 'offer') - 'offeredAtMs',
  'a replayed pull id answers the same offer (same Run, Attempt, Lease), not a second claim');
select ok((:'again'::jsonb -> 'offer' ->> 'offeredAtMs')::bigint between :t0 and :t1,
  'the replay''s offeredAtMs is now, so leaseExpiresAtMs - offeredAtMs is the time left');
select is((select count(*) from ql.run_attempts a join ql.runs r on r.id = a.run_id where r.id in (:'rr1', :'rr2')),
  1::bigint, 'one Attempt in the pool: the second queued Run was not claimed');
select is((select l.token_digest::bytea from ql.run_leases l where l.attempt_id = (:'first'::jsonb -> 'offer' ->> 'attemptId')::uuid),
  pg_temp.digest('token-r2'), 'the Lease now answers to the token of the answer that arrived');
select is(pg_temp.state(), regexp_replace(:'before', encode(pg_temp.digest('token-r1'), 'hex'),
                                          encode(pg_temp.digest('token-r2'), 'hex')),
  'the replay changed nothing but that digest (no event, no version)');
set local role ql_runtime;
select is(pg_temp.activate('starting', :'wr', :'sr', (:'first'::jsonb -> 'offer'), 'token-r1') ->> 'reason', 'token_mismatch',
  'the first token, never delivered, no longer opens the Attempt');
select is(pg_temp.activate('starting', :'wr', :'sr', (:'first'::jsonb -> 'offer'), 'token-r2') ->> 'status', 'applied',
  'the delivered token starts it');
reset role;
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.offer_pull_v1(:'wr', :'sr', 1, pg_temp.digest('token-r3'), :'pid'), '{"status": "empty", "reason": "pull_spent"}'::jsonb,
  'once the Attempt started, the pull id is spent: empty/pull_spent, never a second claim');
reset role;
select is(pg_temp.state(), :'before', 'a spent pull id changes nothing');
select is((select count(*) from ql.run_attempts a where a.worker_id = :'wr'), 1::bigint, 'still one offer for this Worker');
set local role ql_runtime;
select is(ql_api.offer_pull_v1(:'wr', :'sr', 1, pg_temp.digest('token-r4'), gen_random_uuid()) -> 'offer' ->> 'runId', :'rr2',
  'a new pull id claims the next Run');
reset role;

-- 13. A retry is offered at its retry time by the pull itself (no convergence): not before, in its turn among
-- the queued Runs by the time each became offerable, moved to queued by ql.run_requeue (one run.requeued by
-- actor system, then the claim), never with a cancel intent.
select pg_temp.mk_project() as rt_project \gset
select pg_temp.mk_revision(:'rt_project', '{"argv": ["false"], "maxAttempts": 3, "retryBackoffMs": 60000, "pool": "rt-pool"}') as rt_rev \gset
select pg_temp.mk_run(:'rt_rev') as rt_run \gset
select pg_temp.mk_worker('rt-pool') as rt_w \gset
set local role ql_runtime;
select pg_temp.offer_at(:'rt_w', 'running') as rt_o1 \gset
select (:'rt_o1'::jsonb ->> 'sessionId')::uuid as rt_s \gset
select pg_temp.complete(:'rt_w', :'rt_s', :'rt_o1', 1, 1) ->> 'runStatus' as rt_end \gset
reset role;
select is(:'rt_end'::text, 'retry_wait', 'setup: the failed first Attempt leaves the Run in retry_wait for 60 s');
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.offer_pull_v1(:'rt_w', :'rt_s', 1, pg_temp.digest('token-t')), '{"status": "empty", "reason": "no_work"}'::jsonb,
  'a retry not yet due is not offered: no_work');
reset role;
select is(pg_temp.state(), :'before', 'the pull before the retry time changes nothing');

-- Due now (the retry time moved into the past), with a queued Run queued after it and one queued before it.
select pg_temp.mk_run(:'rt_rev') as rt_before, pg_temp.mk_run(:'rt_rev') as rt_after, ql.now_ms() as rt_t \gset
update ql.runs set retry_at_ms = :rt_t - 5000 where id = :'rt_run';
update ql.runs set queued_at_ms = :rt_t - 9000 where id = :'rt_before';
update ql.runs set queued_at_ms = :rt_t - 1000 where id = :'rt_after';
select r.version as rt_version, r.event_sequence as rt_seq from ql.runs r where r.id = :'rt_run' \gset
set local role ql_runtime;
select ql_api.offer_pull_v1(:'rt_w', :'rt_s', 1, pg_temp.digest('token-t1')) -> 'offer' as rt_p1 \gset
reset role;
select is(:'rt_p1'::jsonb ->> 'runId', :'rt_before', 'a Run queued before the retry time is offered first');
set local role ql_runtime;
select ql_api.offer_pull_v1(:'rt_w', :'rt_s', 1, pg_temp.digest('token-t2')) -> 'offer' as rt_p2 \gset
reset role;
select is(array[:'rt_p2'::jsonb ->> 'runId', :'rt_p2'::jsonb ->> 'attemptNo', :'rt_p2'::jsonb ->> 'leaseGeneration'],
  array[:'rt_run', '2', '2'],
  'then the due retry, before the Run queued after its retry time: Attempt 2, lease generation 2');
select results_eq(
  format($$select e.sequence, e.type, e.actor_kind::text, e.payload from ql.run_events e
            where e.run_id = %L and e.sequence > %s order by e.sequence$$, :'rt_run', :rt_seq),
  format($$values (%s::bigint, 'run.requeued'::text, 'system'::text, '{"attemptCount": 1}'::jsonb)$$, :rt_seq + 1),
  'the pull wrote run.requeued (actor system, the Attempts spent) at the next sequence, and no claim event');
select results_eq(
  format($$select r.status::text, r.retry_at_ms::bigint, r.queued_at_ms = e.occurred_at_ms, r.version, r.attempt_count,
                  r.current_attempt_id = (%L::jsonb ->> 'attemptId')::uuid
             from ql.runs r join ql.run_events e on e.run_id = r.id and e.type = 'run.requeued' where r.id = %L$$,
         :'rt_p2', :'rt_run'),
  format($$values ('queued'::text, null::bigint, true, %s::bigint, 2, true)$$, :rt_version + 1),
  'the Run is queued and claimed: retry time cleared, queued at the requeue''s database time, one version more');
select ok(pg_temp.stream_ok(:'rt_run'), 'the retried Run''s stream stays contiguous with its version');
set local role ql_runtime;
select is(ql_api.offer_pull_v1(:'rt_w', :'rt_s', 1, pg_temp.digest('token-t3')) -> 'offer' ->> 'runId', :'rt_after',
  'the Run queued after the retry time comes last');
reset role;
set local role ql_scheduler;
select is(ql_api.lease_expiry_reconcile_v1(16, 0) ->> 'requeued', '0', 'convergence finds nothing left to requeue');
reset role;

-- A due retry with a cancel intent is never offered (convergence ends it).
set local role ql_runtime;
select pg_temp.activate('start_failure', :'rt_w', :'rt_s', :'rt_p2', 'token-t2', 'spawn.enoent') -> 'snapshot' ->> 'runStatus' as rt_again \gset
reset role;
select is(:'rt_again'::text, 'retry_wait', 'setup: the second Attempt''s start failure schedules another retry');
update ql.runs set retry_at_ms = ql.now_ms() - 1000 where id = :'rt_run';
select ql.run_cancel_intent(:'rt_run', 'user', 'user', null, ql.now_ms()) as rt_cancel_seq \gset
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.offer_pull_v1(:'rt_w', :'rt_s', 1, pg_temp.digest('token-t4')), '{"status": "empty", "reason": "no_work"}'::jsonb,
  'a due retry with a cancel intent is not offered: an intent always wins over a retry');
reset role;
select is(pg_temp.state(), :'before', 'that pull changed nothing');

-- A signed revision: its offer carries planSignature (the stored object, beside the plan, never inside it); an
-- unsigned one has no such key (the offers above). A replayed pull answers it again.
select jsonb_build_object('keyId', '00112233aabbccdd', 'signature', repeat('Zz09', 21) || 'xw==') as sg_sig \gset
select pg_temp.mk_project() as sg_project \gset
select ql_api.task_create_v1(:'sg_project', 'signed', '{"argv": ["true"], "pool": "signed-pool"}', :'sg_sig')
  ->> 'revisionId' as sg_rev \gset
select pg_temp.mk_run(:'sg_rev') as sg_run \gset
select pg_temp.mk_worker('signed-pool') as sg_w \gset
select '6d0d0e54-0e1f-4a35-9a83-1f4f0a1b2c3d' as sg_pull \gset
set local role ql_runtime;
select pg_temp.open_session(:'sg_w') as sg_s \gset
select ql_api.offer_pull_v1(:'sg_w', :'sg_s', 1, pg_temp.digest('token-sg'), :'sg_pull') -> 'offer' as sg_o \gset
select ql_api.offer_pull_v1(:'sg_w', :'sg_s', 1, pg_temp.digest('token-sg2'), :'sg_pull') -> 'offer' as sg_o2 \gset
reset role;
select is(array(select k from jsonb_object_keys(:'sg_o'::jsonb) k order by k),
  array['attemptId', 'attemptNo', 'leaseExpiresAtMs', 'leaseGeneration', 'leaseVersion', 'offerExpiresAtMs',
        'offerId', 'offeredAtMs', 'plan', 'planSignature', 'projectId', 'runId'],
  'a signed revision''s offer carries the documented keys and planSignature');
select is(:'sg_o'::jsonb -> 'planSignature', :'sg_sig'::jsonb, 'planSignature is exactly the stored signature');
select is(:'sg_o'::jsonb -> 'plan', '{"argv": ["true"], "pool": "signed-pool"}'::jsonb,
  'the plan is the stored plan, the signature not inside it');
select is(:'sg_o2'::jsonb -> 'planSignature', :'sg_sig'::jsonb, 'a replayed pull answers the same planSignature');

select * from finish();
rollback;
