-- Deploy qinglong:ql_api/lease_expiry_reconcile_v1 to pg
-- FROZEN COPY of db/functions/ql_api/lease_expiry_reconcile_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.lease_expiry_reconcile_v1: one bounded page of lease-expiry recovery and the retry authority.
-- Lock order: Attempt advisory lock (TRY) → run (FOR NO KEY UPDATE SKIP LOCKED) → attempt → lease; step 2: run (FOR
--   NO KEY UPDATE SKIP LOCKED).
create or replace function ql_api.lease_expiry_reconcile_v1(p_limit integer, p_grace_ms bigint)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- Step 1 (Attempts, oldest expiry first, at most p_limit):
--   claimed whose Lease (= offer) expired            → Attempt abandoned; the Run stays queued and
--                                                       offerable again (event attempt.abandoned), or
--                                                       fails (claims_exhausted) after 100 Attempts;
--   starting|running whose Lease expired more than
--   p_grace_ms ago                                   → Attempt lost, Run lost (attempt.lost, run.lost);
--                                                       if its deadline came while its Lease still held
--                                                       and no intent exists, the timeout intent too (the
--                                                       Run overran its timeout: it ends timed_out, with
--                                                       no retry, whether or not a renewal came in time).
--   The Worker stops its process at its own conservative local expiry (docs/architecture.md §7), so after
--   expiry + grace no process of that Attempt can still run.
-- Step 2 (Runs, at most p_limit): a lost Run without a cancel intent → retry_wait (backoff) or failed
--   when maxAttempts is spent (ql.retry_decision); a due retry_wait Run without an intent → queued
--   (ql.run_requeue, the one path of that move: a pull of the Run's pool makes it too, at the retry time).
--   A Run with a cancel intent is left to convergence: an intent always wins over a retry.
-- Every candidate is skipped, never waited for, when another transaction holds it.
declare
  v_candidate record;
  v_run ql.runs;
  v_attempt ql.run_attempts;
  v_lease ql.run_leases;
  v_now bigint;
  v_decision record;
  v_abandoned int := 0;
  v_lost int := 0;
  v_retry int := 0;
  v_failed int := 0;
  v_requeued int := 0;
  v_scanned int := 0;
begin
  if p_limit is null or p_limit not between 1 and 128 then return ql.outcome('invalid', 'limit'); end if;
  if p_grace_ms is null or p_grace_ms not between 0 and 86400000 then return ql.outcome('invalid', 'grace_ms'); end if;

  v_now := ql.now_ms();
  -- Live Attempts (claimed, starting, running) are the unended ones (ql.run_attempts_live_worker_idx).
  for v_candidate in
    select a.id as attempt_id, a.run_id
      from ql.run_attempts a join ql.run_leases l on l.attempt_id = a.id
     where a.ended_at_ms is null
       and l.expires_at_ms <= v_now - case when a.status = 'claimed' then 0 else p_grace_ms end
     order by l.expires_at_ms, a.id
     limit p_limit
  loop
    v_scanned := v_scanned + 1;
    continue when not pg_try_advisory_xact_lock(ql.attempt_lock_key(v_candidate.attempt_id));
    select * into v_run from ql.runs r where r.id = v_candidate.run_id for no key update skip locked;
    continue when v_run.id is null;
    select * into v_attempt from ql.run_attempts a where a.id = v_candidate.attempt_id for no key update;
    select * into v_lease from ql.run_leases l where l.attempt_id = v_candidate.attempt_id for no key update;
    v_now := ql.now_ms();
    if v_attempt.status = 'claimed' and v_lease.expires_at_ms <= v_now then
      update ql.run_attempts a set status = 'abandoned', version = a.version + 1, ended_at_ms = v_now
       where a.id = v_attempt.id;
      update ql.runs r set current_attempt_id = null where r.id = v_run.id;
      perform ql.run_event(v_run.id, null, 'attempt.abandoned', 'reconciler', null, v_attempt.id,
        jsonb_build_object('attemptNo', v_attempt.attempt_no, 'leaseExpiredAtMs', v_lease.expires_at_ms),
        v_now, 'attempt.ended:' || v_attempt.id::text);
      if v_run.attempt_count >= 100 and v_run.cancel_requested_at_ms is null then
        -- attempt_no is 1..100: a Run whose claims were abandoned 100 times can never be offered again.
        perform ql.run_event(v_run.id, 'failed', 'run.failed', 'reconciler', null, v_attempt.id,
          '{"reason": "claims_exhausted"}', v_now, 'run.claims_exhausted:' || v_run.id::text);
      end if;
      v_abandoned := v_abandoned + 1;
    elsif v_attempt.status in ('starting', 'running') and v_lease.expires_at_ms <= v_now - p_grace_ms then
      update ql.run_attempts a set status = 'lost', version = a.version + 1, ended_at_ms = v_now
       where a.id = v_attempt.id;
      update ql.runs r set current_attempt_id = null where r.id = v_run.id;
      perform ql.run_event(v_run.id, null, 'attempt.lost', 'reconciler', null, v_attempt.id,
        jsonb_build_object('attemptNo', v_attempt.attempt_no, 'leaseExpiredAtMs', v_lease.expires_at_ms),
        v_now, 'attempt.ended:' || v_attempt.id::text);
      perform ql.run_event(v_run.id, 'lost', 'run.lost', 'reconciler', null, v_attempt.id,
        jsonb_build_object('attemptNo', v_attempt.attempt_no), v_now, 'run.after_attempt:' || v_attempt.id::text);
      if v_attempt.deadline_at_ms <= v_lease.expires_at_ms then
        perform ql.run_cancel_intent(v_run.id, 'timeout', 'reconciler', null, v_now);  -- nothing if one exists
      end if;
      v_lost := v_lost + 1;
    end if;
  end loop;

  -- A lost Run has no retry time (coalesce 0) and a retry_wait Run always has one, so "lost, or a due retry"
  -- is the range coalesce(retry_at_ms, 0) <= now of ql.runs_retry_due_idx: an index range that ends at the
  -- first retry not yet due, however many wait behind it.
  v_now := ql.now_ms();
  for v_run in
    select * from ql.runs r
     where r.cancel_requested_at_ms is null and r.status in ('lost', 'retry_wait')
       and coalesce(r.retry_at_ms, 0) <= v_now
     order by coalesce(r.retry_at_ms, 0), r.id
     limit p_limit
     for no key update skip locked
  loop
    v_scanned := v_scanned + 1;
    v_now := ql.now_ms();
    if v_run.status = 'lost' then
      select * into v_decision from ql.retry_decision(v_run, v_now);
      update ql.runs r set retry_at_ms = v_decision.retry_at_ms where r.id = v_run.id;
      perform ql.run_event(v_run.id, v_decision.status,
        case v_decision.status when 'retry_wait' then 'run.retry_scheduled' else 'run.failed' end,
        'reconciler', null, null,
        jsonb_strip_nulls(jsonb_build_object('status', v_decision.status, 'retryAtMs', v_decision.retry_at_ms,
                                             'from', 'lost')),
        v_now, 'run.after_lost:' || v_run.id::text || ':' || v_run.attempt_count::text);
      if v_decision.status = 'retry_wait' then v_retry := v_retry + 1; else v_failed := v_failed + 1; end if;
    else
      perform ql.run_requeue(v_run, 'reconciler', v_now);
      v_requeued := v_requeued + 1;
    end if;
  end loop;

  return jsonb_build_object('status', 'ok', 'scanned', v_scanned, 'abandoned', v_abandoned, 'lost', v_lost,
                            'retryScheduled', v_retry, 'failed', v_failed, 'requeued', v_requeued);
end;
$$;

comment on function ql_api.lease_expiry_reconcile_v1(integer, bigint) is
'Returns ok {abandoned, lost, retryScheduled, failed, requeued, scanned} | invalid (limit, grace_ms). Raises '
'nothing on input.';
grant execute on function ql_api.lease_expiry_reconcile_v1(integer, bigint) to ql_scheduler;

commit;
