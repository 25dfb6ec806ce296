-- Deploy qinglong:ql/run_cancel_intent to pg
-- FROZEN COPY of db/functions/ql/run_cancel_intent.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql.run_cancel_intent: write a Run's durable cancel intent once, with its run.cancel_requested event.
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
-- Used by lease control (reason timeout) and by user cancellation (reason user). The caller holds
-- the Run's row lock and passes database time read after its locks.
begin
  update ql.runs r
     set cancel_requested_at_ms = p_at_ms, cancel_reason = p_reason
   where r.id = p_run_id
     and r.cancel_requested_at_ms is null
     and not ql.is_terminal(r.status);
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
'Returns the event''s sequence, or NULL (writing nothing) when an intent exists or the Run is terminal. Raises '
'only on a caller bug.';

commit;
