-- Revert qinglong:ql/run_event from pg
-- RESTORES the previous instance: the body of deploy/ql/run_event@v0.1.0.sql with its grants,
-- written by scripts/sync_functions.py; never edit this one.
begin;
set local role ql_owner;
revoke all on function ql.run_event(uuid, ql.run_status, text, ql.actor_kind, uuid, uuid, jsonb, bigint, text, uuid) from public, ql_runtime, ql_scheduler, ql_readonly;

-- ql.run_event: append one event to a Run's stream, optionally moving the Run to a new status.
-- The ONLY writer of ql.run_events: one UPDATE bumps runs.version and runs.event_sequence together
-- and the event takes exactly that sequence, so sequences are contiguous from 1 per Run.
-- The caller holds the Run's row lock and passes database time read after its locks.
-- signature: ql.run_event(uuid, ql.run_status, text, ql.actor_kind, uuid, uuid, jsonb, bigint, text, uuid)
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
declare
  v_sequence bigint;
begin
  update ql.runs r
     set status = coalesce(p_status, r.status),
         ended_at_ms = case when coalesce(p_status, r.status) in ('succeeded', 'failed', 'cancelled', 'timed_out')
                            then coalesce(r.ended_at_ms, p_at_ms) end,
         version = r.version + 1,
         event_sequence = r.event_sequence + 1
   where r.id = p_run_id
  returning r.event_sequence into v_sequence;
  if not found then
    raise exception using errcode = 'QLBUG', message = pg_catalog.format('ql.run_event: run %s does not exist', p_run_id);
  end if;

  insert into ql.run_events (run_id, sequence, event_id, dedupe_key, type, actor_kind, actor_id,
                             attempt_id, payload, occurred_at_ms)
  values (p_run_id, v_sequence, coalesce(p_event_id, pg_catalog.gen_random_uuid()), p_dedupe_key, p_type,
          p_actor_kind, p_actor_id, p_attempt_id, coalesce(p_payload, '{}'), p_at_ms);
  return v_sequence;
end;
$$;

comment on function ql.run_event(uuid, ql.run_status, text, ql.actor_kind, uuid, uuid, jsonb, bigint, text, uuid) is
'Appends one Run event (and optionally a status change) with the next contiguous sequence; returns it. '
'Raises QLBUG when the Run does not exist (a caller bug) and unique_violation on a duplicate dedupe key.';

commit;
