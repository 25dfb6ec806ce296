-- ql_api.attempt_lease_control_v2: renew an Attempt's Lease, carry durable stop requests (decision 0000 (ADR-0118 §2)),
-- and take the running ACK along (docs/decisions/0031).
-- Lock order: advisory Attempt → lease → attempt (fast path; every other writer of these rows holds the advisory
--   lock first); the full path: ql.attempt_fence (its lock order).
create or replace function ql_api.attempt_lease_control_v2(
  p_worker_id uuid,
  p_session_id uuid,
  p_worker_generation bigint,
  p_project_id uuid,
  p_run_id uuid,
  p_attempt_id uuid,
  p_offer_id uuid,
  p_lease_generation bigint,
  p_token_digest bytea,
  p_expected_version bigint,
  p_running boolean            -- the process exists: a starting Attempt becomes running in the same transaction
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- p_running (the running ACK carried by a renewal, decision 0031): a renewal or replay that answers renewed or
-- stop_requested also moves a starting Attempt to running (running_at_ms = the renewal's time, version and
-- callback_sequence +1, no event: what ql_api.attempt_activation_v1's running ACK writes) in a statement after the
-- renewal's, under the same advisory lock; a running Attempt is left as it is (the ACK's replay). With p_running, a
-- claimed Attempt (no starting ACK yet) is fenced state_drift and nothing changes, as a running ACK before the
-- starting one is. Every other answer changes nothing, as without it. NULL is invalid (running).
-- A live claimed|starting|running Attempt whose fence and expected version hold gets Lease version +1 and a new
-- expiry from database time: now + the Lease's own length (ttl_ms, resolved by the pull from the plan, the pool or
-- the global setting: decision 0028; ql.settings.lease_ttl_ms for a Lease without one). The Attempt's own version
-- stays: decision 0020. Then, in the same transaction:
--   an existing cancel intent            → stop_requested with its reason (the renewal gives the
--                                          Worker time to stop and complete);
--   the pinned deadline passed, no intent → write the timeout intent (cancel_requested_at_ms,
--                                          reason timeout, run.cancel_requested), stop_requested;
--   otherwise                             → renewed.
-- Replay of a lost answer: expected_version = current version - 1 under the full fence and an
-- unexpired Lease is the retry of the renewal that committed while its answer was lost. It answers
-- the stored state and renews nothing: the same version, stop_requested where an intent exists (a deadline
-- passed since the renewal writes its timeout intent first, as the renewal would have: decision 0016), and
-- renewedAtMs = database time NOW with the stored expiresAtMs, so the Worker's local expiry (send
-- instant + expiresAtMs - renewedAtMs) stays at or before the database's (docs/decisions/0004).
-- An Attempt that ended by completion answers terminal with the exact projection; old session,
-- any other old version, expired Lease, token mismatch and state drift are fenced with a reason and
-- change nothing.
-- The fast path, the common renewal: after the Attempt's advisory lock (which every writer of an Attempt or
-- its Lease takes first), ONE statement renews the Lease with the whole fence and the
-- renewal's own conditions in its WHERE — offer, identity, live unexpired session of this Worker and
-- generation, lease generation, token digest, live Attempt, expected version, unexpired Lease, no deadline
-- to act on — reading the session and the Run without locking them (no shared row locks: concurrent renewals
-- of one Worker create no MultiXacts). When it matches nothing (a replay, a fence, a deadline passed, bad
-- input) the full path below answers, exactly as before.
-- Its answer reads the Run's intent once more, in a statement of its own, when the renewal saw none: the renewal
-- statement's view of the Run is as of its start (and a wait for the Lease row re-checks only the Lease), so a
-- cancel that committed meanwhile would otherwise be answered one renewal late. The read locks nothing.
declare
  f record;
  v_run ql.runs;
  v_attempt ql.run_attempts;
  v_lease ql.run_leases;
  v_now bigint;
begin
  if p_expected_version is null or p_expected_version not between 1 and ql.max_safe_integer() - 1 then
    return ql.outcome('invalid', 'expected_version');
  end if;
  if p_running is null then return ql.outcome('invalid', 'running'); end if;

  perform pg_advisory_xact_lock(ql.attempt_lock_key(p_attempt_id));
  v_now := ql.now_ms();
  with renewed as (
    update ql.run_leases l
       set version = l.version + 1, renewed_at_ms = v_now, expires_at_ms = v_now + coalesce(l.ttl_ms, st.lease_ttl_ms)
      from ql.run_attempts a, ql.runs r, ql.worker_sessions s, ql.settings st
     where l.attempt_id = p_attempt_id and l.lease_generation = p_lease_generation
       and l.token_digest = p_token_digest and l.version = p_expected_version and l.expires_at_ms > v_now
       and a.id = l.attempt_id and a.offer_id = p_offer_id and a.worker_id = p_worker_id
       and a.worker_generation = p_worker_generation
       and a.status in ('claimed', 'starting', 'running') and (not p_running or a.status <> 'claimed')
       and r.id = a.run_id and r.id = p_run_id and r.project_id = p_project_id
       and (r.cancel_requested_at_ms is not null or a.deadline_at_ms is null or a.deadline_at_ms > v_now)
       and s.id = p_session_id and ql.session_fence(s, p_worker_id, p_worker_generation, v_now) is null
    returning l.attempt_id, l.version, l.expires_at_ms, a.status, a.deadline_at_ms, r.cancel_reason,
              r.cancel_requested_at_ms
  )
  select n.version, n.expires_at_ms, n.status, n.deadline_at_ms, n.cancel_reason, n.cancel_requested_at_ms
    into v_lease.version, v_lease.expires_at_ms, v_attempt.status, v_attempt.deadline_at_ms, v_run.cancel_reason,
         v_run.cancel_requested_at_ms
    from renewed n;

  if found and v_run.cancel_requested_at_ms is null then
    select r.cancel_reason, r.cancel_requested_at_ms into v_run.cancel_reason, v_run.cancel_requested_at_ms
      from ql.runs r where r.id = p_run_id;
  elsif not found then   -- the full path
    select * into f from ql.attempt_fence(p_worker_id, p_session_id, p_worker_generation, p_project_id,
                                          p_run_id, p_attempt_id, p_offer_id, p_lease_generation, p_token_digest);
    if f.outcome is not null then return f.outcome; end if;
    v_run := f.run; v_attempt := f.attempt; v_lease := f.lease; v_now := f.now_ms;

    if ql.is_terminal(v_attempt.status) then
      return jsonb_build_object(
        'status', 'terminal', 'runStatus', v_run.status, 'attemptStatus', v_attempt.status,
        'exitCode', v_attempt.exit_code, 'errorCode', v_attempt.error_code, 'endedAtMs', v_attempt.ended_at_ms);
    end if;
    if v_attempt.status not in ('claimed', 'starting', 'running') then
      return ql.outcome('fenced', 'state_drift');   -- lost or abandoned: the Attempt is no longer this Worker's
    end if;
    if v_lease.version not in (p_expected_version, p_expected_version + 1) then
      return ql.outcome('fenced', 'stale_version');
    end if;
    if v_lease.expires_at_ms <= v_now then return ql.outcome('fenced', 'lease_expired'); end if;
    if p_running and v_attempt.status = 'claimed' then
      return ql.outcome('fenced', 'state_drift');   -- running before starting
    end if;
    if v_lease.version = p_expected_version then   -- else the replay: answer the stored renewal
      update ql.run_leases l
         set version = l.version + 1, renewed_at_ms = v_now, expires_at_ms = v_now + coalesce(l.ttl_ms, st.lease_ttl_ms)
        from ql.settings st
       where l.attempt_id = p_attempt_id
      returning l.* into v_lease;
    end if;
    if v_run.cancel_requested_at_ms is null and v_attempt.deadline_at_ms <= v_now then   -- renewal or replay
      perform ql.run_cancel_intent(p_run_id, 'timeout', 'system', null, v_now);
      select * into v_run from ql.runs r where r.id = p_run_id;
    end if;
  end if;
  -- The running ACK taken along, after either path renewed (or replayed): a statement of its own, so the renewal's
  -- statement is the same for every call and PL/pgSQL keeps its generic plan (a flag in it made every call plan anew).
  if p_running and v_attempt.status = 'starting' then
    update ql.run_attempts a
       set status = 'running', version = a.version + 1, callback_sequence = a.callback_sequence + 1,
           running_at_ms = v_now
     where a.id = p_attempt_id;
  end if;

  return jsonb_build_object(
    'status', case when v_run.cancel_requested_at_ms is null then 'renewed' else 'stop_requested' end,
    'leaseVersion', v_lease.version,
    'renewedAtMs', v_now,   -- a renewal's own time; for a replay, now: expiresAtMs - renewedAtMs is the time left
    'expiresAtMs', v_lease.expires_at_ms,
    'deadlineAtMs', v_attempt.deadline_at_ms,
    'stopReason', v_run.cancel_reason,
    'cancelRequestedAtMs', v_run.cancel_requested_at_ms);
end;
$$;

comment on function ql_api.attempt_lease_control_v2(uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, bigint, boolean) is
'Returns renewed | stop_requested {leaseVersion, renewedAtMs, expiresAtMs, deadlineAtMs, stopReason, '
'cancelRequestedAtMs} | terminal {runStatus, attemptStatus, exitCode, errorCode, endedAtMs} | invalid '
'(expected_version, running) | not_found | fenced (ql.attempt_fence reasons, state_drift, stale_version, '
'lease_expired); never the token or its digest. Raises nothing on input.';
grant execute on function ql_api.attempt_lease_control_v2(uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, bigint, boolean) to ql_runtime;
