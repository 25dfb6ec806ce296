-- Task schedules (docs/architecture.md §3): a task's cron expression, time zone and overlap policy, the
-- scheduler's cursor (next_fire_at_ms), and the append-only record of every fire time it handled.
--
-- Why a table keyed by task and not a column of ql.task_execution_revisions: a revision is immutable and a
-- Run pins it for what it executes, while a schedule says when to enqueue and has state that moves every
-- fire (next_fire_at_ms). On a revision, each fire would need a new revision (or a mutable column on an
-- immutable row), changing a schedule would re-pin the plan of every later Run, and the due scan would
-- read every revision. A schedule row is changed in place by ql_api.task_schedule_set_v1 and advanced by
-- ql_api.schedule_fire_v1; what was fired, skipped or enqueued is kept in ql.schedule_fires.
begin;
set local role ql_owner;

create table ql.task_schedules (
  task_id uuid primary key,
  project_id uuid not null,
  cron text not null check (pg_catalog.length(cron) between 1 and 200),
  timezone text not null check (pg_catalog.length(timezone) between 1 and 64),
  overlap text not null check (overlap in ('skip', 'allow')),
  next_fire_at_ms ql.ms not null,
  created_at_ms ql.ms not null,
  updated_at_ms ql.ms not null,
  foreign key (task_id, project_id) references ql.tasks (id, project_id)
);
comment on table ql.task_schedules is
'A task''s schedule: cron (5 fields, ql.cron_parse) read on the wall clock of timezone (an IANA name), and what to do '
'while a Run of the task is not terminal (overlap). At most one per task.';
comment on column ql.task_schedules.next_fire_at_ms is
'The first fire time not yet handled (database time, ms). The scheduler handles it once it is due and moves it past '
'now: fire times missed while nothing ran the scheduler are folded into one (docs/operations.md, "Schedules").';
comment on column ql.task_schedules.overlap is
'skip: a fire time while any Run of the task is not terminal enqueues nothing (recorded as skipped_overlap) | '
'allow: it enqueues anyway';
create index task_schedules_due_idx on ql.task_schedules (next_fire_at_ms, task_id);
comment on index ql.task_schedules_due_idx is 'Candidates of ql_api.schedule_fire_v1, in its order: the most overdue first.';

create table ql.schedule_fires (
  task_id uuid not null,
  fire_at_ms ql.ms not null,
  project_id uuid not null,
  decided_at_ms ql.ms not null,
  outcome text not null check (outcome in ('enqueued', 'skipped_overlap', 'skipped_inactive')),
  run_id uuid references ql.runs (id) deferrable initially deferred,
  blocking_run_id uuid references ql.runs (id),
  caught_up boolean not null,
  primary key (task_id, fire_at_ms),
  foreign key (task_id, project_id) references ql.tasks (id, project_id),
  check ((outcome = 'enqueued') = (run_id is not null)),
  check ((outcome = 'skipped_overlap') = (blocking_run_id is not null))
);
comment on table ql.schedule_fires is
'One row per (task, fire time) the scheduler handled, append-only. The primary key is the exactly-once guarantee: a '
'fire time is enqueued at most once, whoever races for it.';
comment on column ql.schedule_fires.outcome is
'enqueued: run_id was queued for it | skipped_overlap: blocking_run_id (a Run of the task) was not terminal and the '
'schedule says skip | skipped_inactive: the Project is archived (or the task has no current revision)';
comment on column ql.schedule_fires.caught_up is
'true: later fire times had passed too when it was handled (the scheduler was behind); they were folded into this one.';
create trigger schedule_fires_append_only before update or delete on ql.schedule_fires
  for each row execute function ql.reject_mutation();
create trigger schedule_fires_no_truncate before truncate on ql.schedule_fires
  for each statement execute function ql.reject_mutation();

-- The overlap check: is any Run of this task not terminal? Only live Runs are in it, so it stays small.
create index runs_task_live_idx on ql.runs (task_id)
  where status not in ('succeeded', 'failed', 'cancelled', 'timed_out');
comment on index ql.runs_task_live_idx is 'The Runs of a task that are not terminal (the overlap check of ql_api.schedule_fire_v1).';

commit;
