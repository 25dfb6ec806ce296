-- Deploy qinglong:ql_api/run_cancellation_converge_v1 to pg
-- FROZEN COPY of db/functions/ql_api/run_cancellation_converge_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.run_cancellation_converge_v1: one bounded page of cancellation convergence (decision 0000 (ADR-0118 §7)).
-- Lock order: run (FOR NO KEY UPDATE SKIP LOCKED) → Attempt advisory lock (TRY: a busy Attempt is blocked, never
--   waited for, so the fence's order, advisory → run, cannot deadlock) → attempt → lease.
create or replace function ql_api.run_cancellation_converge_v1(p_limit integer)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- Picks Runs that carry a durable cancel intent but are in created|queued|waiting_approval|retry_wait|lost
-- (lost is not terminal: a retry could still requeue it), FOR UPDATE SKIP LOCKED, so several convergers
-- split the work: Runs that no Attempt holds first, then oldest intent first (a held Run may be
-- blocked, and blocked Runs must not fill every page ahead of convergeable ones) — two passes over
-- ql.runs_cancel_pending_idx, the held ones only when the page has room left. For each locked Run:
--   latest Attempt claimed and its Lease no longer active → Attempt cancelled|timed_out, then the Run
--     (two reconciler events, contiguous sequence and version);
--   no Attempt, or the latest one already ended             → the Run only (one event);
--   latest Attempt starting|running (past the start barrier), a claimed Attempt whose Lease is still
--     active, or an Attempt another transaction holds       → reported blocked, never faked: only the
--     Worker's completion (or lease-expiry recovery) ends those.
-- Event ids are computed only for locked candidates, from ql.stable_event_id over the Run/Attempt and the
-- intent's timestamp, so a retried pass reproduces them and the unique event_id refuses a double write.
declare
  v_run ql.runs;
  v_attempt ql.run_attempts;
  v_lease ql.run_leases;
  v_now bigint;
  v_final ql.run_status;
  v_scanned int := 0;
  v_converged uuid[] := array[]::uuid[];
  v_blocked uuid[] := array[]::uuid[];
  v_held boolean;
begin
  if p_limit is null or p_limit not between 1 and 128 then return ql.outcome('invalid', 'limit'); end if;

  foreach v_held in array array[false, true] loop
    exit when v_scanned >= p_limit;
    for v_run in
      select * from ql.runs r
       where r.cancel_requested_at_ms is not null
         and r.status in ('created', 'queued', 'waiting_approval', 'retry_wait', 'lost')
         and (r.current_attempt_id is not null) = v_held
       order by r.cancel_requested_at_ms, r.id
       limit p_limit - v_scanned
       for no key update skip locked
    loop
      v_scanned := v_scanned + 1;
      v_final := case v_run.cancel_reason when 'timeout' then 'timed_out' else 'cancelled' end;
      select * into v_attempt from ql.run_attempts a where a.run_id = v_run.id order by a.attempt_no desc limit 1;

      if v_attempt.id is not null and v_attempt.status in ('claimed', 'starting', 'running') then
        if not pg_try_advisory_xact_lock(ql.attempt_lock_key(v_attempt.id)) then
          v_blocked := v_blocked || v_run.id;
          continue;
        end if;
        select * into v_attempt from ql.run_attempts a where a.id = v_attempt.id for no key update;
        select * into v_lease from ql.run_leases l where l.attempt_id = v_attempt.id for no key update;
        v_now := ql.now_ms();
        if v_attempt.status <> 'claimed' or v_lease.expires_at_ms > v_now then
          v_blocked := v_blocked || v_run.id;
          continue;
        end if;
        perform ql.attempt_end(v_run, v_attempt, null, null, null, 'reconciler', null, v_now,
          ql.stable_event_id('ql.converge.attempt', v_run.id, v_attempt.id, v_run.cancel_requested_at_ms),
          ql.stable_event_id('ql.converge.run', v_run.id, v_attempt.id, v_run.cancel_requested_at_ms));
      else
        v_now := ql.now_ms();
        update ql.runs r set current_attempt_id = null where r.id = v_run.id and r.current_attempt_id is not null;
        perform ql.run_event(v_run.id, v_final, 'run.' || v_final, 'reconciler', null, null,
          jsonb_build_object('status', v_final, 'reason', v_run.cancel_reason, 'from', v_run.status),
          v_now, 'run.converged:' || v_run.id::text,
          ql.stable_event_id('ql.converge.run', v_run.id, null, v_run.cancel_requested_at_ms));
      end if;
      v_converged := v_converged || v_run.id;
    end loop;
  end loop;

  return jsonb_build_object('status', 'ok', 'scanned', v_scanned, 'converged', cardinality(v_converged),
                            'blocked', cardinality(v_blocked), 'convergedRunIds', to_jsonb(v_converged),
                            'blockedRunIds', to_jsonb(v_blocked));
end;
$$;

comment on function ql_api.run_cancellation_converge_v1(integer) is
'Returns ok {scanned, converged, blocked, convergedRunIds, blockedRunIds} | invalid (limit: 1..128). Raises '
'nothing on input.';
grant execute on function ql_api.run_cancellation_converge_v1(integer) to ql_scheduler;

commit;
