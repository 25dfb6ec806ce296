-- ql.run_event: append one event to a Run's stream, optionally moving the Run to a new status.
create or replace function ql.run_event(
  p_run_id uuid,
  p_status ql.run_status,       -- NULL keeps the status
  p_type text,
  p_actor_kind ql.actor_kind,
  p_actor_id uuid,
  p_attempt_id uuid,
  p_payload jsonb,
  p_at_ms bigint,
  p_dedupe_key text,
  p_event_id uuid default null  -- NULL: a fresh server id; convergence passes a stable one
)
returns bigint
language plpgsql
volatile
as $$
-- One UPDATE bumps runs.version and runs.event_sequence together and the event takes exactly that sequence
-- (ql.run_event_insert writes it and refuses a duplicate event id or dedupe key), so sequences are contiguous
-- from 1 per Run. A caller that also changes other columns of the Run makes that one UPDATE itself and calls
-- ql.run_event_insert (one write of the Run per call).
-- The caller holds the Run's row lock and passes database time read after its locks.
declare
  v_sequence bigint;
  v_created bigint;
begin
  update ql.runs r
     set status = coalesce(p_status, r.status),
         ended_at_ms = case when ql.is_terminal(coalesce(p_status, r.status)) then coalesce(r.ended_at_ms, p_at_ms) end,
         version = r.version + 1,
         event_sequence = r.event_sequence + 1
   where r.id = p_run_id
  returning r.event_sequence, r.created_at_ms into v_sequence, v_created;
  if not found then
    raise exception using errcode = 'QLBUG', message = pg_catalog.format('ql.run_event: run %s does not exist', p_run_id);
  end if;

  perform ql.run_event_insert(p_run_id, v_sequence, v_created, p_type, p_actor_kind, p_actor_id, p_attempt_id, p_payload,
                              p_at_ms, p_dedupe_key, p_event_id);
  return v_sequence;
end;
$$;

comment on function ql.run_event(uuid, ql.run_status, text, ql.actor_kind, uuid, uuid, jsonb, bigint, text, uuid) is
'Returns the event''s sequence. Raises QLBUG when the Run does not exist and unique_violation on a duplicate '
'event id or dedupe key of the Run (run_events_event_id_key, run_events_dedupe_key_key).';
