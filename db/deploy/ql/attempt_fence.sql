-- Deploy qinglong:ql/attempt_fence to pg
-- FROZEN COPY of db/functions/ql/attempt_fence.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql.attempt_fence: take an Attempt's locks in the fixed order and check the Worker's full fence.
-- Lock order: advisory lock on the Attempt → run (FOR NO KEY UPDATE), for every caller, so concurrent calls cannot
--   deadlock.
create or replace function ql.attempt_fence(
  p_worker_id uuid,
  p_session_id uuid,
  p_worker_generation bigint,
  p_project_id uuid,
  p_run_id uuid,
  p_attempt_id uuid,
  p_offer_id uuid,
  p_lease_generation bigint,
  p_token_digest bytea,
  out outcome jsonb,
  out now_ms bigint,
  out run ql.runs,
  out attempt ql.run_attempts,
  out lease ql.run_leases
)
language plpgsql
volatile
as $$
-- Every Attempt-scoped Worker command (activation, lease control, artifact, completion) starts here.
-- The Attempt and its Lease are read after those locks, not row-locked: every writer of them holds the
-- Attempt's advisory lock first (this fence, the renewal fast path, the pull's replay, lease-expiry
-- reconciliation, cancellation convergence), so each statement after it sees the last holder's commit; a
-- caller's own UPDATE locks the row it writes. ql_api.prune_v1 deletes only ended Runs' rows, under the
-- Run's row lock, which this fence holds.
-- The worker session is read after those locks and not locked: a shared lock on it (held by every fenced
-- call of one Worker at once) made a MultiXact of each concurrent pair, and locked nothing the fence needs —
-- no fenced call writes the session, and whoever ends it (replacement, enrolment, disabling) reads no
-- Attempt, so a call in flight while a session ends is ordered before that end, and a call that starts
-- after it commits reads the ended session and is fenced.
-- Identity columns (attempt → offer, run → project) never change, so they are compared before the locks; liveness
-- (session, generation, lease generation, token digest) after them. The Attempt is found by its id: an Attempt of
-- another Worker (or none) is not_found (offer), and a wrong offer, Run or Project beside it is identity_mismatch.
declare
  v_offer_worker uuid;
  v_identity boolean;
  v_rows record;
  v_session ql.worker_sessions;
  v_invalid text;
begin
  v_invalid := case
    when p_worker_id is null then 'worker_id'
    when p_session_id is null then 'session_id'
    when p_worker_generation is null or p_worker_generation not between 1 and ql.max_safe_integer() then 'worker_generation'
    when p_project_id is null then 'project_id'
    when p_run_id is null then 'run_id'
    when p_attempt_id is null then 'attempt_id'
    when p_offer_id is null then 'offer_id'
    when p_lease_generation is null or p_lease_generation not between 1 and ql.max_safe_integer() then 'lease_generation'
    when p_token_digest is null or pg_catalog.octet_length(p_token_digest) <> 32 then 'token_digest'
  end;
  if v_invalid is not null then
    outcome := pg_catalog.jsonb_build_object('status', 'invalid', 'reason', v_invalid);
    return;
  end if;

  -- Identity (immutable columns, no locks yet). An Attempt offered to another Worker does not exist for this one.
  select a.worker_id,
         a.offer_id = p_offer_id
         and exists (select 1 from ql.runs r where r.id = a.run_id and r.id = p_run_id and r.project_id = p_project_id)
    into v_offer_worker, v_identity
    from ql.run_attempts a where a.id = p_attempt_id;
  if v_offer_worker is null or v_offer_worker <> p_worker_id then
    outcome := ql.outcome('not_found', 'offer');
    return;
  end if;
  if not v_identity then
    outcome := ql.outcome('fenced', 'identity_mismatch');
    return;
  end if;

  -- One statement: the Run locked, its Attempt, Lease and the session as they are once the lock is held
  -- (whoever writes the Attempt or its Lease holds the advisory lock taken just before).
  perform pg_catalog.pg_advisory_xact_lock(ql.attempt_lock_key(p_attempt_id));
  select r as run, a as attempt, l as lease, s as session into v_rows
    from ql.runs r
    left join ql.run_attempts a on a.id = p_attempt_id
    left join ql.run_leases l on l.attempt_id = p_attempt_id
    left join ql.worker_sessions s on s.id = p_session_id
   where r.id = p_run_id
     for no key update of r;
  run := v_rows.run; attempt := v_rows.attempt; lease := v_rows.lease; v_session := v_rows.session;
  now_ms := ql.now_ms();

  outcome := coalesce(ql.session_fence(v_session, p_worker_id, p_worker_generation, now_ms), case
    when attempt.worker_generation <> p_worker_generation
      then ql.outcome('fenced', 'stale_generation')
    when lease.lease_generation <> p_lease_generation
      then ql.outcome('fenced', 'stale_lease_generation')
    when lease.token_digest <> p_token_digest
      then ql.outcome('fenced', 'token_mismatch')
  end);
end;
$$;

comment on function ql.attempt_fence(uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea) is
'Returns (outcome, now_ms, run, attempt, lease): outcome NULL when the fence holds, else invalid | not_found '
'(offer) | fenced (identity_mismatch, stale_session, session_expired, stale_generation, stale_lease_generation, '
'token_mismatch); now_ms is database time after the locks. Never raises on input.';

commit;
