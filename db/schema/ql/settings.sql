-- The control plane's tunables: one row, read (never written) on hot paths.
begin;
set local role ql_owner;

create table ql.settings (
  singleton boolean primary key default true check (singleton),
  offer_ttl_ms bigint not null default 30000 check (offer_ttl_ms between 1000 and 3600000),
  lease_ttl_ms bigint not null default 30000 check (lease_ttl_ms between 1000 and 3600000),
  session_ttl_ms bigint not null default 120000 check (session_ttl_ms between 1000 and 86400000),
  artifact_max_bytes integer not null default 1048576 check (artifact_max_bytes between 1 and 8388608)
);
comment on table ql.settings is 'One row of control-plane tunables. Durations in ms of database time.';
comment on column ql.settings.offer_ttl_ms is 'How long a claimed offer (and its first Lease) lives before the starting ACK must arrive.';
comment on column ql.settings.lease_ttl_ms is 'The TTL a lease-control renewal grants, measured from database time.';
comment on column ql.settings.session_ttl_ms is 'How long a Worker session lives without a heartbeat.';
comment on column ql.settings.artifact_max_bytes is 'Largest artifact content accepted by upload.';
insert into ql.settings default values;

commit;
