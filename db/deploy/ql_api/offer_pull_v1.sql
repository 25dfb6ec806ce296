-- Deploy qinglong:ql_api/offer_pull_v1 to pg
-- FROZEN COPY of db/functions/ql_api/offer_pull_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.offer_pull_v1: offer the oldest offerable Run of the Worker's pool (qinglong/remote-offer@v1).
-- Lock order: session (FOR NO KEY UPDATE: serializes this Worker's pulls, so capacity holds) → runs (FOR UPDATE SKIP
--   LOCKED: the oldest due retry, then the oldest older queued Run; never waits, so the two row locks cannot
--   deadlock; the offerable predicate lives on the run row, so a pull racing a commit re-checks it on the newest row
--   version). A replayed pull: session → advisory lock on the Attempt → attempt → lease (whoever writes an Attempt
--   or its Lease holds its advisory lock first).
create or replace function ql_api.offer_pull_v1(
  p_worker_id uuid,
  p_session_id uuid,
  p_worker_generation bigint,
  p_token_digest bytea,
  p_pull_id uuid default null
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- Offerable: no Attempt holds it, no cancel intent, and either queued or in retry_wait with its retry
-- time reached; oldest by the time it became offerable ((queued_at_ms, id), or (retry_at_ms, id) for a
-- retry), so a due retry is offered at its retry time, in its turn, without waiting for convergence.
-- Two bounded index probes: the oldest due retry (ql.runs_retry_offerable_idx), then the oldest queued
-- Run older than it (ql.runs_offerable_idx); the older of the two is claimed. A due retry is first
-- moved to queued by ql.run_requeue (event run.requeued, actor system), the same move convergence
-- makes for a due retry no pull took first. A retry that loses to an older queued Run stays locked
-- until this transaction ends (a concurrent pull skips it meanwhile) and is otherwise untouched.
-- Creates the Attempt (claimed; the offer is its columns: offer id, session, expiry, pull id) and its Lease
-- (generation = attempt number, version 1, the token's SHA-256 only, expiry = offer expiry, and ttl_ms = the Lease
-- length every renewal grants: ql.lease_ttl_ms, the plan's, the pool's or the global one; the offer lasts the
-- shorter of offer_ttl_ms and that length, so a pool of short Leases also gives up a dead Worker's offers soon,
-- decision 0028); the Run stays
-- queued until the starting ACK. The claim writes no event: the Attempt row is its record (worker, offer,
-- claimed_at_ms, offer expiry; docs/decisions/0029), and the Run's version, which counts its events, stays.
-- It is one write of the Run (its current Attempt and count), a HOT update: no index of ql.runs names those
-- columns (ql/lifecycle_lean), so a claimed Run stays in ql.runs_offerable_idx until its starting ACK and later
-- pulls skip it by its row.
-- The shell makes the raw token and passes only its digest; the token never reaches the database.
-- offeredAtMs is the database time of this answer: the Worker's first local Lease expiry is its
-- pull's send instant + leaseExpiresAtMs - offeredAtMs (never later than the database's).
-- Replay of a lost answer: a pull carries the id the Worker persisted before sending it. A pull
-- whose id already made an offer of this Worker claims nothing new: while that Attempt is still
-- claimed at lease version 1 with a live Lease, it answers the same offer with the Lease's token
-- digest moved to this request's (the first token never arrived) and offeredAtMs = now, so the time
-- left is what remains; otherwise {"status":"empty","reason":"pull_spent"}. NULL: no replay.
-- The offer carries the pinned revision's plan and, only when that revision is signed, its planSignature
-- ({keyId, signature}, which the Worker verifies before it starts anything); an unsigned offer has no such key.
declare
  v_session ql.worker_sessions;
  v_pool text;
  v_now bigint;
  v_run ql.runs;
  v_retry ql.runs;
  v_plan jsonb;
  v_signature jsonb;
  v_attempt ql.run_attempts;
  v_lease ql.run_leases;
  v_fence jsonb;
  v_ttl bigint;
begin
  if p_worker_id is null then return ql.outcome('invalid', 'worker_id'); end if;
  if p_session_id is null then return ql.outcome('invalid', 'session_id'); end if;
  if p_worker_generation is null or p_worker_generation not between 1 and ql.max_safe_integer() then
    return ql.outcome('invalid', 'worker_generation');
  end if;
  if p_token_digest is null or octet_length(p_token_digest) <> 32 then
    return ql.outcome('invalid', 'token_digest');
  end if;

  select * into v_session from ql.worker_sessions s where s.id = p_session_id for no key update;
  v_now := ql.now_ms();
  v_fence := ql.session_fence(v_session, p_worker_id, p_worker_generation, v_now);
  if v_fence is not null then return v_fence; end if;
  -- The session was opened under the Worker's generation; disabling or re-enrolling the Worker
  -- stops new work at once, even before its live session is closed.
  select w.pool into v_pool from ql.workers w
   where w.id = p_worker_id and w.status = 'active' and w.generation = p_worker_generation;
  if v_pool is null then return ql.outcome('fenced', 'worker_disabled'); end if;
  -- Only with a pull id: a NULL one would make PL/pgSQL plan this statement anew on every call (its plan for NULL,
  -- folded to nothing, always looks cheaper than the generic one; docs/decisions/0031).
  if p_pull_id is not null then
    select * into v_attempt from ql.run_attempts a where a.worker_id = p_worker_id and a.pull_id = p_pull_id;
  end if;
  if v_attempt.id is not null then   -- the replay of a pull whose answer was lost: never a second claim
    perform pg_catalog.pg_advisory_xact_lock(ql.attempt_lock_key(v_attempt.id));
    select * into v_attempt from ql.run_attempts a where a.id = v_attempt.id for no key update;
    select * into v_lease from ql.run_leases l where l.attempt_id = v_attempt.id for no key update;
    v_now := ql.now_ms();
    if v_attempt.status <> 'claimed' or v_lease.version <> 1 or v_lease.expires_at_ms <= v_now then
      return ql.outcome('empty', 'pull_spent');
    end if;
    update ql.run_leases l set token_digest = p_token_digest where l.attempt_id = v_attempt.id;
    select * into v_run from ql.runs r where r.id = v_attempt.run_id;
  else
    -- Live Attempts (claimed, starting, running) are the unended ones: ql.run_attempts_live_worker_idx.
    if (select count(*) from ql.run_attempts a
        where a.worker_id = p_worker_id and a.ended_at_ms is null) >= v_session.capacity then
      return ql.outcome('empty', 'at_capacity');
    end if;

    v_now := ql.now_ms();
    select * into v_retry from ql.runs r
     where r.pool = v_pool and r.status = 'retry_wait' and r.current_attempt_id is null
       and r.cancel_requested_at_ms is null and r.retry_at_ms <= v_now and r.attempt_count < 100
     order by r.retry_at_ms, r.id
     limit 1
     for update skip locked;
    select * into v_run from ql.runs r
     where r.pool = v_pool and r.status = 'queued' and r.current_attempt_id is null
       and r.cancel_requested_at_ms is null and r.attempt_count < 100
       and (r.queued_at_ms, r.id) < (coalesce(v_retry.retry_at_ms, ql.max_safe_integer() + 1),  -- no due retry: any
                                     coalesce(v_retry.id, 'ffffffff-ffff-ffff-ffff-ffffffffffff'))
     order by r.queued_at_ms, r.id
     limit 1
     for update skip locked;
    if v_run.id is null then
      if v_retry.id is null then return ql.outcome('empty', 'no_work'); end if;
      v_run := v_retry;
      perform ql.run_requeue(v_run, 'system', ql.now_ms());
    end if;

    v_now := ql.now_ms();

    v_ttl := ql.lease_ttl_ms(v_run.pool, v_run.task_revision_id);
    insert into ql.run_attempts (run_id, attempt_no, status, worker_id, worker_generation, offer_id, claimed_at_ms,
                                 session_id, offer_expires_at_ms, pull_id)
    select v_run.id, v_run.attempt_count + 1, 'claimed', p_worker_id, p_worker_generation, gen_random_uuid(), v_now,
           p_session_id, v_now + least(st.offer_ttl_ms, v_ttl), p_pull_id
      from ql.settings st
    returning * into v_attempt;
    insert into ql.run_leases (attempt_id, lease_generation, token_digest, renewed_at_ms, expires_at_ms, ttl_ms)
    values (v_attempt.id, v_attempt.attempt_no, p_token_digest, v_now, v_attempt.offer_expires_at_ms, v_ttl)
    returning * into v_lease;
    update ql.runs r
       set current_attempt_id = v_attempt.id, attempt_count = v_attempt.attempt_no
     where r.id = v_run.id;
  end if;

  select t.plan_json, t.plan_signature into strict v_plan, v_signature
    from ql.task_execution_revisions t where t.id = v_run.task_revision_id;
  return jsonb_build_object('status', 'offered', 'offer', jsonb_build_object(
    'offerId', v_attempt.offer_id,
    'projectId', v_run.project_id,
    'runId', v_run.id,
    'attemptId', v_attempt.id,
    'attemptNo', v_attempt.attempt_no,
    'leaseGeneration', v_lease.lease_generation,
    'leaseVersion', v_lease.version,
    'offeredAtMs', v_now,
    'leaseExpiresAtMs', v_lease.expires_at_ms,
    'offerExpiresAtMs', v_attempt.offer_expires_at_ms,
    'plan', v_plan)
    || case when v_signature is null then '{}'::jsonb else jsonb_build_object('planSignature', v_signature) end);
end;
$$;

comment on function ql_api.offer_pull_v1(uuid, uuid, bigint, bytea, uuid) is
'Returns offered {offer: offerId, projectId, runId, attemptId, attemptNo, leaseGeneration, leaseVersion, '
'offeredAtMs, leaseExpiresAtMs, offerExpiresAtMs, plan, and planSignature only when the revision is signed} (for a '
'replayed pull id, the same offer) | empty (no_work, at_capacity, pull_spent) | invalid | fenced (stale_session, '
'session_expired, stale_generation, worker_disabled); never the token digest. Raises nothing on input.';
grant execute on function ql_api.offer_pull_v1(uuid, uuid, bigint, bytea, uuid) to ql_runtime;

commit;
