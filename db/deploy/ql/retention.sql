-- Deploy qinglong:ql/retention to pg
-- FROZEN COPY of db/schema/ql/retention.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
-- Retention as a DBA expects it (docs/decisions/0009-retention.md): ql.run_events and ql.security_audit become
-- natively partitioned by time (monthly ranges of occurred_at_ms and at_ms), so their old rows leave by DROP of
-- whole partitions, never by DELETE: both stay append-only for every role. The rows already there are copied
-- into one <table>_phistory partition (everything before this month); this month and the next 13 get their own.
-- run_events loses its foreign keys to runs and run_attempts (a pruned Run leaves its events in their
-- partition until the whole partition is dropped) and its global unique event_id / dedupe_key (a partitioned
-- table's unique keys must hold the partition key): ql.run_event checks both within the Run instead, under
-- the Run's row lock. ql.settings gains run_retention_days and audit_retention_days; ql.table_sizes is the
-- DBA's view (granted to ql_readonly).
-- ql.schedule_fires loses its foreign keys to runs too: the record of a handled fire time outlives its Run.
-- ql.runs_ended_idx finds the oldest terminal Runs for ql_api.prune_v1.
-- Live traffic: every table this touches is locked first, in the order the writers lock them (runs,
-- run_attempts, run_events, security_audit, schedule_fires), in the strongest mode needed, so no lock is
-- upgraded here. Writers wait for the copy (a few seconds per million events) and then go on.
begin;
set local role ql_owner;
lock table ql.runs, ql.run_attempts, ql.run_events, ql.security_audit, ql.schedule_fires in access exclusive mode;

alter table ql.schedule_fires drop constraint schedule_fires_run_id_fkey,
                              drop constraint schedule_fires_blocking_run_id_fkey;
create index runs_ended_idx on ql.runs (ended_at_ms) where ended_at_ms is not null;
comment on index ql.runs_ended_idx is 'ql_api.prune_v1: the terminal Runs, the longest ended first';

alter table ql.settings
  add column run_retention_days integer default 90 check (run_retention_days between 1 and 3650),
  add column audit_retention_days integer default 365 check (audit_retention_days between 1 and 3650);
comment on column ql.settings.run_retention_days is
'Terminal Runs that ended more than this many days ago are pruned with everything of theirs (ql_api.prune_v1), '
'and run_events partitions past it holding no event of a kept Run are dropped. NULL: kept.';
comment on column ql.settings.audit_retention_days is
'security_audit partitions whose every row is older than this many days are dropped. NULL: kept.';

-- The old tables step aside (their indexes too, whose names the new ones take).
alter table ql.run_events rename to run_events_unpartitioned;
alter index ql.run_events_pkey rename to run_events_unpartitioned_pkey;
alter index ql.run_events_event_id_key rename to run_events_unpartitioned_event_id_key;
alter index ql.run_events_dedupe_key_key rename to run_events_unpartitioned_dedupe_key_key;
alter table ql.security_audit rename to security_audit_unpartitioned;
alter index ql.security_audit_pkey rename to security_audit_unpartitioned_pkey;
alter index ql.security_audit_at_idx rename to security_audit_unpartitioned_at_idx;

create table ql.run_events (
  run_id uuid not null,
  sequence bigint not null check (sequence >= 1),
  event_id uuid not null,
  dedupe_key text not null,
  type text not null check (type ~ '^[a-z_]+\.[a-z_]+$'),
  actor_kind ql.actor_kind not null,
  actor_id uuid,
  attempt_id uuid,
  payload jsonb not null default '{}' check (pg_catalog.jsonb_typeof(payload) = 'object'),
  occurred_at_ms ql.ms not null,
  primary key (run_id, sequence, occurred_at_ms)
) partition by range (occurred_at_ms);
comment on table ql.run_events is
'The append-only history of a Run; sequence is contiguous from 1 per Run (written only by ql.run_event). '
'Monthly partitions <table>_pYYYYMM by occurred_at_ms; old ones are dropped whole (ql_api.retention_maintain_v1).';
create trigger run_events_append_only before update or delete on ql.run_events
  for each row execute function ql.reject_mutation();
create trigger run_events_no_truncate before truncate on ql.run_events
  for each statement execute function ql.reject_mutation();

create table ql.security_audit (
  id uuid not null default pg_catalog.gen_random_uuid(),
  at_ms ql.ms not null,
  subject_id uuid references ql.subjects (id),
  worker_id uuid references ql.workers (id),
  route text not null check (pg_catalog.length(route) between 1 and 200),
  project_id uuid,
  permission text,
  decision text not null check (decision in ('allow', 'deny', 'require_approval')),
  reason text not null check (reason ~ '^[a-z0-9_.]{1,64}$'),
  request_id text not null check (pg_catalog.length(request_id) between 1 and 128),
  primary key (id, at_ms)
) partition by range (at_ms);
create index security_audit_at_idx on ql.security_audit (at_ms);
comment on table ql.security_audit is
'One row per admission decision, committed before the request body is read. Append-only. '
'Monthly partitions <table>_pYYYYMM by at_ms; old ones are dropped whole (ql_api.retention_maintain_v1).';
create trigger security_audit_append_only before update or delete on ql.security_audit
  for each row execute function ql.reject_mutation();
create trigger security_audit_no_truncate before truncate on ql.security_audit
  for each statement execute function ql.reject_mutation();

-- Everything before this month goes to one history partition; this month and the next 13 exist ahead.
do $$
declare
  v_month bigint := (extract(epoch from pg_catalog.date_trunc('month', pg_catalog.clock_timestamp() at time zone 'UTC')
                                       at time zone 'UTC') * 1000)::bigint;
begin
  execute pg_catalog.format('create table ql.run_events_phistory partition of ql.run_events '
                            'for values from (minvalue) to (%s)', v_month);
  execute pg_catalog.format('create table ql.security_audit_phistory partition of ql.security_audit '
                            'for values from (minvalue) to (%s)', v_month);
  -- A statement trigger is not cloned onto a partition (ql.partition_ensure adds it to the others).
  create trigger run_events_phistory_no_truncate before truncate on ql.run_events_phistory
    for each statement execute function ql.reject_mutation();
  create trigger security_audit_phistory_no_truncate before truncate on ql.security_audit_phistory
    for each statement execute function ql.reject_mutation();
  perform ql.partition_ensure('ql.run_events', v_month, 13);
  perform ql.partition_ensure('ql.security_audit', v_month, 13);
end
$$;

insert into ql.run_events select * from ql.run_events_unpartitioned;
insert into ql.security_audit select * from ql.security_audit_unpartitioned;
drop table ql.run_events_unpartitioned;
drop table ql.security_audit_unpartitioned;

create view ql.table_sizes as
select c.relname::text collate pg_catalog."default" as table_name, s.total_bytes, s.partitions, s.rows_estimate,
       case c.relname
         when 'runs' then (select pg_catalog.min(r.created_at_ms) from ql.runs r)
         when 'run_attempts' then (select pg_catalog.min(a.claimed_at_ms) from ql.run_attempts a)
         when 'run_leases' then (select pg_catalog.min(l.renewed_at_ms) from ql.run_leases l)
         when 'run_events' then (select pg_catalog.min(e.occurred_at_ms) from ql.run_events e)
         when 'security_audit' then (select pg_catalog.min(s.at_ms) from ql.security_audit s)
         when 'offers' then (select pg_catalog.min(o.created_at_ms) from ql.offers o)
         when 'artifacts' then (select pg_catalog.min(a.created_at_ms) from ql.artifacts a)
         when 'mutations' then (select pg_catalog.min(m.created_at_ms) from ql.mutations m)
         when 'output_chunks' then (select pg_catalog.min(o.received_at_ms) from ql.output_chunks o)
         when 'worker_sessions' then (select pg_catalog.min(w.opened_at_ms) from ql.worker_sessions w)
         when 'schedule_fires' then (select pg_catalog.min(f.decided_at_ms) from ql.schedule_fires f)
       end as oldest_at_ms
  from pg_catalog.pg_class c
 cross join lateral (
   select pg_catalog.sum(pg_catalog.pg_total_relation_size(p.oid))::bigint as total_bytes,
          (pg_catalog.count(*) filter (where p.relispartition))::integer as partitions,
          pg_catalog.sum(greatest(p.reltuples, 0))::bigint as rows_estimate
     from pg_catalog.pg_class p
    where (p.oid = c.oid and c.relkind = 'r')
       or p.oid in (select t.relid from pg_catalog.pg_partition_tree(c.oid) t where t.isleaf)) s
 where c.relnamespace = 'ql'::regnamespace and c.relkind in ('r', 'p') and not c.relispartition;
comment on view ql.table_sizes is
'For the DBA: each ql table (a partitioned one summed over its partitions): total size with indexes and TOAST, '
'leaf partitions, a row estimate (last ANALYZE/VACUUM; 0 before the first) and its oldest row''s time (ms; NULL: no '
'such column or no row). oldest_at_ms reads the tables (sequential scans): query it on demand, not from a monitor loop.';
grant usage on schema ql to ql_readonly;
grant select on ql.table_sizes to ql_readonly;

commit;
