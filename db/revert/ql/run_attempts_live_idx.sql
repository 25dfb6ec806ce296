-- Revert qinglong:ql/run_attempts_live_idx from pg
-- The index as ql/runs made it (keyed on status).
begin;
set local role ql_owner;

drop index ql.run_attempts_live_worker_idx;
create index run_attempts_live_worker_idx on ql.run_attempts (worker_id) where status in ('claimed', 'starting', 'running');

commit;
