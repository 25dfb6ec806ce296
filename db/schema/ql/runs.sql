-- Runs, their Attempts, the Attempt's Lease and Offer, the Run's event stream and artifacts.
begin;
set local role ql_owner;

create table ql.runs (
  id uuid primary key default pg_catalog.gen_random_uuid(),
  project_id uuid not null references ql.projects (id),
  task_id uuid not null,
  task_revision_id uuid not null,
  pool text not null check (pool ~ '^[a-z0-9_-]{1,64}$'),
  status ql.run_status not null,
  version bigint not null default 1 check (version >= 1),
  event_sequence bigint not null default 0 check (event_sequence >= 0),
  cancel_requested_at_ms ql.ms,
  cancel_reason ql.cancel_reason,
  attempt_count integer not null default 0 check (attempt_count between 0 and 100),
  current_attempt_id uuid,
  retry_at_ms ql.ms,
  queued_at_ms ql.ms,
  created_at_ms ql.ms not null,
  ended_at_ms ql.ms,
  foreign key (task_revision_id, task_id, project_id)
    references ql.task_execution_revisions (id, task_id, project_id),
  check ((cancel_requested_at_ms is null) = (cancel_reason is null)),
  check ((status in ('succeeded', 'failed', 'cancelled', 'timed_out')) = (ended_at_ms is not null)),
  check (status <> 'retry_wait' or retry_at_ms is not null)
) with (fillfactor = 90);
comment on table ql.runs is
'One execution request of a task, pinned to one task revision. Every event bumps version and event_sequence together (ql.run_event).';
comment on column ql.runs.current_attempt_id is 'The Attempt that holds the Run now (claimed, starting or running); NULL when none does. The pull predicate reads it, so a concurrent pull re-checks it after the row lock.';
comment on column ql.runs.cancel_requested_at_ms is 'The durable cancel intent (database time); set once, never cleared.';
create index runs_offerable_idx on ql.runs (pool, queued_at_ms, id)
  where status = 'queued' and current_attempt_id is null and cancel_requested_at_ms is null;
create index runs_project_idx on ql.runs (project_id, created_at_ms);

create table ql.run_attempts (
  id uuid primary key default pg_catalog.gen_random_uuid(),
  run_id uuid not null references ql.runs (id),
  attempt_no integer not null check (attempt_no between 1 and 100),
  status ql.attempt_status not null,
  version bigint not null default 1 check (version >= 1),
  callback_sequence integer not null default 0 check (callback_sequence >= 0),
  worker_id uuid not null references ql.workers (id),
  worker_generation bigint not null,
  offer_id uuid not null unique,
  deadline_at_ms ql.ms,
  claimed_at_ms ql.ms not null,
  started_at_ms ql.ms,
  running_at_ms ql.ms,
  ended_at_ms ql.ms,
  exit_code integer,
  error_code text check (error_code ~ '^[a-z0-9_.]{1,64}$'),
  completion_digest ql.sha256,
  unique (run_id, attempt_no),
  check ((status in ('claimed', 'starting', 'running')) = (ended_at_ms is null))
) with (fillfactor = 80);
comment on table ql.run_attempts is
'One try of a Run on one Worker. version bumps with every change, including each Lease renewal.';
comment on column ql.run_attempts.deadline_at_ms is 'Pinned by the starting ACK: database time + plan timeoutMs; NULL when the revision has no timeout.';
comment on column ql.run_attempts.callback_sequence is 'How many Worker callbacks (activation, completion) this Attempt accepted.';
comment on column ql.run_attempts.completion_digest is 'SHA-256 of the accepted completion, so an exact replay answers already_completed.';
create index run_attempts_live_worker_idx on ql.run_attempts (worker_id) where status in ('claimed', 'starting', 'running');

alter table ql.runs add foreign key (current_attempt_id) references ql.run_attempts (id) deferrable initially deferred;

create table ql.run_leases (
  attempt_id uuid primary key references ql.run_attempts (id),
  lease_generation bigint not null check (lease_generation >= 1),
  token_digest ql.sha256 not null,
  version bigint not null default 1 check (version >= 1),
  renewed_at_ms ql.ms not null,
  expires_at_ms ql.ms not null
) with (fillfactor = 50);
comment on table ql.run_leases is
'An Attempt''s fenced Lease. Only the SHA-256 of the raw token is stored. No index on the columns a renewal writes, so renewals stay HOT updates.';
comment on column ql.run_leases.lease_generation is 'The Run''s lease generation: the Attempt number that owns it.';

create table ql.offers (
  id uuid primary key,
  attempt_id uuid not null unique references ql.run_attempts (id),
  worker_id uuid not null references ql.workers (id),
  session_id uuid not null references ql.worker_sessions (id),
  created_at_ms ql.ms not null,
  expires_at_ms ql.ms not null,
  pull_id uuid,              -- the Worker's id for the pull that made it (NULL: a pull that cannot be replayed)
  unique (worker_id, pull_id)
);
comment on table ql.offers is 'The offer that made an Attempt: who it was offered to, in which session, until when, by which pull.';

create table ql.run_events (
  run_id uuid not null references ql.runs (id),
  sequence bigint not null check (sequence >= 1),
  event_id uuid not null unique,
  dedupe_key text not null unique,
  type text not null check (type ~ '^[a-z_]+\.[a-z_]+$'),
  actor_kind ql.actor_kind not null,
  actor_id uuid,
  attempt_id uuid references ql.run_attempts (id),
  payload jsonb not null default '{}' check (pg_catalog.jsonb_typeof(payload) = 'object'),
  occurred_at_ms ql.ms not null,
  primary key (run_id, sequence)
);
comment on table ql.run_events is 'The append-only history of a Run; sequence is contiguous from 1 per Run (written only by ql.run_event).';
create trigger run_events_append_only before update or delete on ql.run_events
  for each row execute function ql.reject_mutation();
create trigger run_events_no_truncate before truncate on ql.run_events
  for each statement execute function ql.reject_mutation();

create table ql.artifacts (
  id uuid primary key default pg_catalog.gen_random_uuid(),
  attempt_id uuid not null references ql.run_attempts (id),
  kind text not null check (kind in ('log', 'result')),
  sha256 ql.sha256 not null,
  size integer not null check (size between 0 and 8388608),
  content bytea not null,
  created_at_ms ql.ms not null,
  unique (attempt_id, kind),
  check (pg_catalog.octet_length(content) = size)
);
comment on table ql.artifacts is 'What an Attempt produced (its log, its result). A receipt is (id, sha256, size).';

commit;
