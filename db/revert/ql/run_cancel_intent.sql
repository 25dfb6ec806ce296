-- Revert qinglong:ql/run_cancel_intent from pg
-- RESTORES the previous instance: the body of deploy/ql/run_cancel_intent@v0.1.0.sql with its grants,
-- written by scripts/sync_functions.py; never edit this one.
begin;
set local role ql_owner;
revoke all on function ql.run_cancel_intent(uuid, ql.cancel_reason, ql.actor_kind, uuid, bigint) from public, ql_runtime, ql_scheduler, ql_readonly;

-- ql.run_cancel_intent: write a Run's durable cancel intent once, with its run.cancel_requested event.
-- Used by lease control (reason timeout) and by user cancellation (reason user). The caller holds
-- the Run's row lock and passes database time read after its locks.
-- signature: ql.run_cancel_intent(uuid, ql.cancel_reason, ql.actor_kind, uuid, bigint)
create or replace function ql.run_cancel_intent(
  p_run_id uuid,
  p_reason ql.cancel_reason,
  p_actor_kind ql.actor_kind,
  p_actor_id uuid,
  p_at_ms bigint
)
returns bigint
language plpgsql
volatile
as $$
begin
  update ql.runs r
     set cancel_requested_at_ms = p_at_ms, cancel_reason = p_reason
   where r.id = p_run_id
     and r.cancel_requested_at_ms is null
     and r.status not in ('succeeded', 'failed', 'cancelled', 'timed_out');
  if not found then
    return null;
  end if;
  return ql.run_event(
    p_run_id, null, 'run.cancel_requested', p_actor_kind, p_actor_id, null,
    pg_catalog.jsonb_build_object('reason', p_reason, 'cancelRequestedAtMs', p_at_ms),
    p_at_ms, 'run.cancel_requested:' || p_run_id::text);
end;
$$;

comment on function ql.run_cancel_intent(uuid, ql.cancel_reason, ql.actor_kind, uuid, bigint) is
'Writes cancel_requested_at_ms/cancel_reason and one run.cancel_requested event; returns the event sequence, '
'or NULL (and writes nothing) when an intent already exists or the Run is terminal.';

commit;
