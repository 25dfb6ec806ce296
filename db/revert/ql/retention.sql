-- Revert qinglong:ql/retention from pg
-- Back to the unpartitioned tables with their foreign keys and global unique keys. Events of Runs that
-- ql_api.prune_v1 already deleted cannot satisfy the foreign key again and are left behind (the Runs are gone);
-- schedule_fires gets its foreign keys back NOT VALID (its rows may name pruned Runs).
begin;
set local role ql_owner;
lock table ql.runs, ql.run_attempts, ql.run_events, ql.security_audit, ql.schedule_fires in access exclusive mode;

revoke select on ql.table_sizes from ql_readonly;
revoke usage on schema ql from ql_readonly;
drop view ql.table_sizes;

alter table ql.run_events rename to run_events_partitioned;
alter index ql.run_events_pkey rename to run_events_partitioned_pkey;
alter table ql.security_audit rename to security_audit_partitioned;
alter index ql.security_audit_pkey rename to security_audit_partitioned_pkey;
alter index ql.security_audit_at_idx rename to security_audit_partitioned_at_idx;

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

create table ql.security_audit (
  id uuid primary key default pg_catalog.gen_random_uuid(),
  at_ms ql.ms not null,
  subject_id uuid references ql.subjects (id),
  worker_id uuid references ql.workers (id),
  route text not null check (pg_catalog.length(route) between 1 and 200),
  project_id uuid,
  permission text,
  decision text not null check (decision in ('allow', 'deny', 'require_approval')),
  reason text not null check (reason ~ '^[a-z0-9_.]{1,64}$'),
  request_id text not null check (pg_catalog.length(request_id) between 1 and 128)
);
create index security_audit_at_idx on ql.security_audit (at_ms);
comment on table ql.security_audit is 'One row per admission decision, committed before the request body is read. Append-only.';
create trigger security_audit_append_only before update or delete on ql.security_audit
  for each row execute function ql.reject_mutation();
create trigger security_audit_no_truncate before truncate on ql.security_audit
  for each statement execute function ql.reject_mutation();

insert into ql.run_events select e.* from ql.run_events_partitioned e
 where exists (select 1 from ql.runs r where r.id = e.run_id);
insert into ql.security_audit select * from ql.security_audit_partitioned;
drop table ql.run_events_partitioned;
drop table ql.security_audit_partitioned;

-- NOT VALID: fire records of Runs already pruned keep their ids; new rows are checked again.
alter table ql.schedule_fires
  add constraint schedule_fires_run_id_fkey foreign key (run_id) references ql.runs (id)
    deferrable initially deferred not valid,
  add constraint schedule_fires_blocking_run_id_fkey foreign key (blocking_run_id) references ql.runs (id) not valid;
drop index ql.runs_ended_idx;

alter table ql.settings drop column run_retention_days, drop column audit_retention_days;

commit;
