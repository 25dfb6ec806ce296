-- Deploy qinglong:ql/workers to pg
-- FROZEN COPY of db/schema/ql/workers.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
-- Enrolled Workers and their sessions. generation fences a re-enrolled Worker: every session and
-- Attempt carries the generation it was made under.
begin;
set local role ql_owner;

create table ql.workers (
  id uuid primary key default pg_catalog.gen_random_uuid(),
  name text not null check (pg_catalog.length(name) between 1 and 200),
  generation bigint not null default 1 check (generation between 1 and 9007199254740991),
  pool text not null default 'default' check (pool ~ '^[a-z0-9_-]{1,64}$'),
  cert_fingerprint ql.sha256 not null,
  status text not null default 'active' check (status in ('active', 'disabled')),
  created_at_ms ql.ms not null default ql.now_ms()
);
comment on table ql.workers is 'An enrolled Worker. cert_fingerprint: SHA-256 of its client certificate (DER). Re-enrolment bumps generation.';
comment on column ql.workers.status is 'active: may open sessions | disabled: every session open is refused';

create table ql.worker_sessions (
  id uuid primary key default pg_catalog.gen_random_uuid(),
  worker_id uuid not null references ql.workers (id),
  worker_generation bigint not null check (worker_generation >= 1),
  status text not null default 'live' check (status in ('live', 'replaced', 'closed', 'expired')),
  capacity integer not null check (capacity between 1 and 1024),
  opened_at_ms ql.ms not null,
  expires_at_ms ql.ms not null,
  ended_at_ms ql.ms,
  check ((status = 'live') = (ended_at_ms is null))
) with (fillfactor = 80);
create unique index worker_sessions_one_live_idx on ql.worker_sessions (worker_id) where status = 'live';
comment on table ql.worker_sessions is 'A Worker''s connection epoch. At most one live session per Worker; opening a new one replaces the old.';
comment on column ql.worker_sessions.status is 'live: current | replaced: a newer session opened | closed: closed by the Worker or by re-enrolment | expired: no heartbeat in time';

commit;
