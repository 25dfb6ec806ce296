-- The live Attempts of a Worker (its capacity count in ql_api.offer_pull_v1, the Worker lists), keyed on
-- `ended_at_ms is null` instead of `status in ('claimed', 'starting', 'running')` — the same rows (the check
-- of ql.run_attempts ties them) — so that no index of ql.run_attempts names a column the starting and
-- running ACKs or a renewal write: those updates are HOT (no new index entries). Only the end of an Attempt
-- (ended_at_ms set) leaves the index.
-- The DROP comes first (ACCESS EXCLUSIVE before CREATE INDEX's SHARE lock: no lock upgrade, no deadlock).
begin;
set local role ql_owner;

drop index ql.run_attempts_live_worker_idx;
create index run_attempts_live_worker_idx on ql.run_attempts (worker_id) where ended_at_ms is null;
comment on index ql.run_attempts_live_worker_idx is
'The live (claimed, starting, running) Attempts of each Worker; keyed on ended_at_ms so the ACKs stay HOT.';

commit;
