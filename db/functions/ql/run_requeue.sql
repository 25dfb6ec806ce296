-- ql.run_requeue: move a due retry_wait Run to queued (event run.requeued): the one path of that move.
create or replace function ql.run_requeue(p_run ql.runs, p_actor_kind ql.actor_kind, p_now_ms bigint)
returns void
language plpgsql
volatile
as $$
-- Two callers reach it: ql_api.offer_pull_v1, which offers a due retry at its retry time (actor
-- system), and ql_api.lease_expiry_reconcile_v1's retry step (actor reconciler), for pools no Worker
-- pulls from. The dedupe key names the Run and its Attempts spent, so the move is written once however
-- many callers race for it. queued_at_ms becomes the move's database time; retry_at_ms is cleared.
-- One UPDATE writes the Run (its move and the event's sequence, ql.run_event_insert).
-- The caller holds the Run's row lock, read the Run after taking it, and passes database time.
-- over a retry: convergence ends such a Run).
declare
  v_sequence bigint;
begin
  if p_run.status is distinct from 'retry_wait' or p_run.retry_at_ms > p_now_ms
     or p_run.cancel_requested_at_ms is not null then
    raise exception using errcode = 'QLBUG',
      message = pg_catalog.format('ql.run_requeue: run %s is not a due retry_wait Run without an intent', p_run.id);
  end if;
  update ql.runs r
     set status = 'queued', queued_at_ms = p_now_ms, retry_at_ms = null,
         version = r.version + 1, event_sequence = r.event_sequence + 1
   where r.id = p_run.id
  returning r.event_sequence into v_sequence;
  perform ql.run_event_insert(p_run.id, v_sequence, p_run.created_at_ms, 'run.requeued', p_actor_kind, null, null,
    pg_catalog.jsonb_build_object('attemptCount', p_run.attempt_count), p_now_ms,
    'run.requeued:' || p_run.id::text || ':' || p_run.attempt_count::text);
end;
$$;

comment on function ql.run_requeue(ql.runs, ql.actor_kind, bigint) is
'Returns nothing (queued_at_ms = now, retry_at_ms cleared). Raises QLBUG for a Run that is not a due retry_wait '
'Run without a cancel intent.';
