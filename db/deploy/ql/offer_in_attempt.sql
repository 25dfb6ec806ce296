-- Deploy qinglong:ql/offer_in_attempt to pg
-- FROZEN COPY of db/schema/ql/offer_in_attempt.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
-- The Offer folded into its Attempt (docs/decisions/0020-a-lifecycle-that-writes-less.md): an Offer was one row per
-- Attempt, written once by the pull in the same transaction, with three indexes and three foreign keys checked on
-- insert. Its columns move onto ql.run_attempts: the session it was made in, its expiry and the pull id it answered
-- (still unique per Worker, for the replay of a lost pull answer). The offer id stays where it was
-- (run_attempts.offer_id); the offer's Worker and creation time were the Attempt's worker_id and claimed_at_ms.
-- session_id is not a foreign key: ql_api.prune_v1 deletes a session only when no Attempt names it, and a key
-- without an index on it would scan ql.run_attempts for each deleted session.
-- Rewrites every Attempt row once (the new columns are filled from ql.offers).
begin;
set local role ql_owner;

alter table ql.run_attempts
  add column session_id uuid,
  add column offer_expires_at_ms ql.ms,
  add column pull_id uuid;
update ql.run_attempts a
   set session_id = o.session_id, offer_expires_at_ms = o.expires_at_ms, pull_id = o.pull_id
  from ql.offers o where o.attempt_id = a.id;
alter table ql.run_attempts
  alter column session_id set not null,
  alter column offer_expires_at_ms set not null;
create unique index run_attempts_pull_idx on ql.run_attempts (worker_id, pull_id) where pull_id is not null;
-- Every fenced call finds its Attempt by id and compares the offer id with it (ql.attempt_fence): no index on the
-- offer id alone, which took an entry at the Attempt's insert and its non-HOT end (docs/decisions/0029).
alter table ql.run_attempts drop constraint run_attempts_offer_id_key;
comment on index ql.run_attempts_pull_idx is 'The Attempt a pull made, by the Worker''s pull id (the replay of a lost answer).';
comment on column ql.run_attempts.offer_id is
'The id of the offer that made this Attempt (a random uuid): every fenced call names it beside the Attempt''s id.';
comment on column ql.run_attempts.session_id is 'The Worker session the offer was made in.';
comment on column ql.run_attempts.offer_expires_at_ms is 'Until when the offer stood (its first Lease expiry).';
comment on column ql.run_attempts.pull_id is 'The Worker''s id for the pull that made it (NULL: a pull that cannot be replayed).';

create or replace view ql.table_sizes as
select c.relname::text collate pg_catalog."default" as table_name, s.total_bytes, s.partitions, s.rows_estimate,
       case c.relname
         when 'runs' then (select pg_catalog.min(r.created_at_ms) from ql.runs r)
         when 'run_attempts' then (select pg_catalog.min(a.claimed_at_ms) from ql.run_attempts a)
         when 'run_leases' then (select pg_catalog.min(l.renewed_at_ms) from ql.run_leases l)
         when 'run_events' then (select pg_catalog.min(e.occurred_at_ms) from ql.run_events e)
         when 'security_audit' then (select pg_catalog.min(s.at_ms) from ql.security_audit s)
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

drop table ql.offers;

commit;
