-- ql.notify_schedule_skipped: AFTER INSERT trigger of ql.schedule_fires: a skipped fire time notifies its Project's rules.
create or replace function ql.notify_schedule_skipped()
returns trigger
language plpgsql
volatile
as $$
-- The trigger's WHEN clause (ql/notify_triggers) passes only skipped_overlap and skipped_inactive; the row names
-- its Project, so this is one probe of the Project's rules (ql.notify_emit), in the scheduler's transaction.
-- Lock order: none taken.
begin
  perform ql.notify_emit(new.project_id, 'schedule.skipped',
    pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object(
      'event', 'schedule.skipped', 'taskId', new.task_id, 'fireAtMs', new.fire_at_ms,
      'reason', pg_catalog.substr(new.outcome, 9), 'blockingRunId', new.blocking_run_id, 'atMs', new.decided_at_ms)),
    new.decided_at_ms);
  return null;
end;
$$;

comment on function ql.notify_schedule_skipped() is
'Trigger function (AFTER INSERT ON ql.schedule_fires, skipped fire times only). Returns NULL. Never raises.';
