-- ql.notify_run_event: AFTER INSERT trigger of ql.run_events: a Run that ended failed, timed_out or cancelled, was lost, or succeeded after a failed Attempt notifies its Project's rules.
create or replace function ql.notify_run_event()
returns trigger
language plpgsql
volatile
as $$
-- The trigger's WHEN clause (ql/notify_triggers) passes only run.failed, run.timed_out, run.cancelled, run.lost and
-- an attempt.succeeded whose attemptNo is above 1 (its Run succeeded after an earlier Attempt failed, was lost or
-- abandoned), so a first Attempt's success, the hot path, never calls this. It runs in the transaction that wrote
-- the event, after the UPDATE of the Run that took its sequence: the Run's row is read by primary key (this
-- transaction just wrote it) and the Project's rules are probed once (ql.notify_emit).
-- Lock order: none taken (the caller holds the Run's row lock).
declare
  v_run record;
  v_kind text;
begin
  v_kind := case new.type when 'attempt.succeeded' then 'run.succeeded_after_failure' else new.type end;
  select r.project_id, r.task_id into v_run from ql.runs r where r.id = new.run_id;
  perform ql.notify_emit(v_run.project_id, v_kind,
    pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object(
      'event', v_kind, 'runId', new.run_id, 'taskId', v_run.task_id, 'eventId', new.event_id,
      'attemptNo', new.payload -> 'attemptNo', 'reason', new.payload -> 'reason', 'atMs', new.occurred_at_ms)),
    new.occurred_at_ms);
  return null;
end;
$$;

comment on function ql.notify_run_event() is
'Trigger function (AFTER INSERT ON ql.run_events, filtered by its WHEN clause). Returns NULL. Never raises.';
