-- The outbox writers (docs/decisions/0023-notifications.md): row triggers, so every path that ends a Run or skips
-- a fire time notifies in its own transaction without any of those functions knowing it. The WHEN clauses are
-- evaluated by the executor without calling a function: a first Attempt's success and every other event cost
-- nothing more; an event that may notify calls the trigger function, which probes the Project's rules once.
-- Row triggers on the partitioned ql.run_events are cloned to every partition, present and future.
begin;
set local role ql_owner;

create trigger run_events_notify after insert on ql.run_events
  for each row
  when (new.type in ('run.failed', 'run.timed_out', 'run.cancelled', 'run.lost')
        or (new.type = 'attempt.succeeded' and (new.payload ->> 'attemptNo')::integer > 1))
  execute function ql.notify_run_event();
create trigger schedule_fires_notify after insert on ql.schedule_fires
  for each row when (new.outcome <> 'enqueued') execute function ql.notify_schedule_skipped();

commit;
