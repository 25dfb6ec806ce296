-- Deploy qinglong:ql/notify to pg
-- FROZEN COPY of db/schema/ql/notify.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
-- Notifications (docs/decisions/0023-notifications.md): a Project's rules (which events, which channel, where, and
-- the NAME of the Project secret that signs or authenticates the message: never a value), the outbox the
-- transaction that makes an event writes into (ql.notify_outbox: one row per rule and event, its id the idempotency
-- key a receiver sees), and every delivery attempt the dispatcher made (ql.notify_deliveries). The dispatcher logs
-- in as ql_notify, which executes only its own ql_api functions (claim, result, Worker scan, prune). Backoff and
-- attempts are tunables of ql.settings; times are database time.
begin;

do $$
begin
  if not exists (select 1 from pg_catalog.pg_roles where rolname = 'ql_notify') then
    create role ql_notify nologin;
  end if;
end
$$;
alter role ql_notify login;
alter role ql_notify set statement_timeout = '10s';
alter role ql_notify set idle_in_transaction_session_timeout = '5s';
grant usage on schema ql_api to ql_notify;

set local role ql_owner;

create table ql.notify_rules (
  id uuid primary key default pg_catalog.gen_random_uuid(),
  project_id uuid not null references ql.projects (id),
  name text not null check (name ~ '^[a-z0-9][a-z0-9._-]{0,63}$'),
  events text[] not null check (pg_catalog.cardinality(events) between 1 and 7 and events <@ array[
    'run.failed', 'run.timed_out', 'run.cancelled', 'run.succeeded_after_failure', 'run.lost', 'worker.offline',
    'schedule.skipped']),
  channel text not null check (channel in ('webhook', 'wecom')),
  url text check (pg_catalog.length(url) between 10 and 2048),
  secret_name ql.secret_name not null,
  template text check (pg_catalog.length(template) between 1 and 2000),
  created_by uuid references ql.subjects (id),
  created_at_ms ql.ms not null,
  updated_at_ms ql.ms not null,
  removed_at_ms ql.ms,
  check ((channel = 'webhook') = (url is not null))
);
create unique index notify_rules_project_name_idx on ql.notify_rules (project_id, name) where removed_at_ms is null;
comment on index ql.notify_rules_project_name_idx is
'A live rule''s name is unique in its Project; the one probe an event makes (its Project''s live rules).';
comment on table ql.notify_rules is
'A Project''s notification rule: the events it notifies, its channel (webhook: url; wecom: the robot webhook), and '
'the name of the Project secret that keys it (the webhook''s HMAC key, the robot''s key). Removal keeps the row '
'(removed_at_ms) as the history its deliveries name.';

create table ql.notify_outbox (
  id uuid primary key default pg_catalog.gen_random_uuid(),
  rule_id uuid not null references ql.notify_rules (id),
  project_id uuid not null references ql.projects (id),
  kind text not null,
  payload jsonb not null check (pg_catalog.jsonb_typeof(payload) = 'object'),
  state text not null default 'pending' check (state in ('pending', 'delivered', 'dead', 'dropped')),
  attempts integer not null default 0 check (attempts >= 0),
  created_at_ms ql.ms not null,
  next_attempt_at_ms ql.ms not null,
  ended_at_ms ql.ms,
  check ((state = 'pending') = (ended_at_ms is null))
) with (fillfactor = 80);
create index notify_outbox_due_idx on ql.notify_outbox (next_attempt_at_ms) where state = 'pending';
create index notify_outbox_project_idx on ql.notify_outbox (project_id, created_at_ms);
create index notify_outbox_ended_idx on ql.notify_outbox (ended_at_ms) where state <> 'pending';
comment on table ql.notify_outbox is
'One notification to deliver at least once: written by the transaction that made its event. id is the '
'idempotency key. pending rows are claimed (SKIP LOCKED) when next_attempt_at_ms is due; a claim moves it a lease '
'ahead, so a dispatcher killed mid-delivery leaves the row due again. delivered | dead (attempts spent) | dropped '
'(its rule was removed) are ended.';

create table ql.notify_deliveries (
  outbox_id uuid not null references ql.notify_outbox (id) on delete cascade,
  attempt_no integer not null check (attempt_no >= 1),
  ok boolean not null,
  status_code integer check (status_code between 100 and 599),
  error text check (error ~ '^[a-z0-9_.:]{1,64}$'),
  duration_ms integer not null check (duration_ms >= 0),
  at_ms ql.ms not null,
  primary key (outbox_id, attempt_no)
);
comment on table ql.notify_deliveries is
'Each delivery attempt the dispatcher reported: HTTP status, a stable error code (never a URL, a body or a value), '
'how long it took.';

create table ql.notify_offline_seen (
  session_id uuid primary key,
  worker_id uuid not null,
  seen_at_ms ql.ms not null
);
comment on table ql.notify_offline_seen is
'Worker sessions whose expiry the dispatcher''s scan already turned into worker.offline notifications.';

alter table ql.settings
  add column notify_backoff_base_ms bigint not null default 2000 check (notify_backoff_base_ms between 100 and 3600000),
  add column notify_backoff_cap_ms bigint not null default 300000 check (notify_backoff_cap_ms between 100 and 86400000),
  add column notify_max_attempts integer not null default 30 check (notify_max_attempts between 1 and 1000);
comment on column ql.settings.notify_backoff_base_ms is 'The wait after a notification''s first failed attempt; it doubles per attempt.';
comment on column ql.settings.notify_backoff_cap_ms is 'The longest wait between two attempts of a notification.';
comment on column ql.settings.notify_max_attempts is 'Attempts after which a notification ends dead.';

alter type ql.invalid_reason add value if not exists 'events';
alter type ql.invalid_reason add value if not exists 'channel';
alter type ql.invalid_reason add value if not exists 'url';
alter type ql.invalid_reason add value if not exists 'secret_name';
alter type ql.invalid_reason add value if not exists 'template';
alter type ql.invalid_reason add value if not exists 'outbox_id';
alter type ql.invalid_reason add value if not exists 'attempt_no';
alter type ql.invalid_reason add value if not exists 'status_code';
alter type ql.invalid_reason add value if not exists 'error';
alter type ql.invalid_reason add value if not exists 'duration_ms';
alter type ql.invalid_reason add value if not exists 'lease_ms';
alter type ql.not_found_reason add value if not exists 'rule';
alter type ql.not_found_reason add value if not exists 'notification';

commit;
