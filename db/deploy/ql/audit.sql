-- Deploy qinglong:ql/audit to pg
-- FROZEN COPY of db/schema/ql/audit.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
-- The security audit (append-only) and the idempotency record of user mutations.
begin;
set local role ql_owner;

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

create table ql.mutations (
  subject_id uuid not null references ql.subjects (id),
  mutation_id text not null check (mutation_id ~ '^[A-Za-z0-9._:-]{1,128}$'),
  command_digest ql.sha256 not null,
  result jsonb not null,
  created_at_ms ql.ms not null,
  primary key (subject_id, mutation_id)
);
comment on table ql.mutations is 'Idempotent user mutations: the same (subject, mutationId) with the same command replays its result.';

commit;
