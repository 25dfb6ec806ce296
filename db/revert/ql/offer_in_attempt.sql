-- Revert qinglong:ql/offer_in_attempt from pg: ql.offers again, filled from the Attempts' columns, which go.
begin;
set local role ql_owner;

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
insert into ql.offers (id, attempt_id, worker_id, session_id, created_at_ms, expires_at_ms, pull_id)
select a.offer_id, a.id, a.worker_id, a.session_id, a.claimed_at_ms, a.offer_expires_at_ms, a.pull_id
  from ql.run_attempts a;


alter table ql.run_attempts add constraint run_attempts_offer_id_key unique (offer_id);
drop index ql.run_attempts_pull_idx;
alter table ql.run_attempts drop column session_id, drop column offer_expires_at_ms, drop column pull_id;
comment on column ql.run_attempts.offer_id is null;

commit;
