-- Deploy qinglong:ql/lifecycle_lean to pg
-- FROZEN COPY of db/schema/ql/lifecycle_lean.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
-- Fewer index writes per Run lifecycle (docs/decisions/0020-a-lifecycle-that-writes-less.md):
-- * current_attempt_id leaves every index of ql.runs, keys and predicates alike, so that the pull's write of the
--   Run (its current Attempt, attempt count, version, event sequence) changes no indexed column and is a HOT
--   update: it wrote every index of ql.runs. A claimed Run stays `queued` until its starting ACK, so the offer
--   indexes now hold it meanwhile; the pull skips it by its row (at most the claims in flight, each for the
--   seconds before its starting ACK).
-- * The Run history keys of ql_api.run_list_v1 go from four to two: a page not filtered by status merges one range
--   per status of the status index (with a task filter, of the task-and-status index): a Merge Append that reads
--   what it returns. Every write of a Run's status wrote all four. ql_api.retention_maintain_v1's per-Project
--   probe of old Runs reads the status index's ranges too (docs/decisions/0029).
-- The DROPs come first: each takes ql.runs' ACCESS EXCLUSIVE lock before a CREATE INDEX takes its SHARE lock (no
-- lock upgrade, no deadlock with live traffic).
begin;
set local role ql_owner;

drop index ql.runs_offerable_idx;
drop index ql.runs_retry_offerable_idx;
drop index ql.runs_cancel_pending_idx;
drop index ql.runs_history_task_idx;
drop index ql.runs_history_idx;

create index runs_offerable_idx on ql.runs (pool, queued_at_ms, id)
  where status = 'queued' and cancel_requested_at_ms is null;
comment on index ql.runs_offerable_idx is
'Queued Runs of ql_api.offer_pull_v1, in its order: per pool, by (queued_at_ms, id); claimed ones are skipped by row.';
create index runs_retry_offerable_idx on ql.runs (pool, retry_at_ms, id)
  where status = 'retry_wait' and cancel_requested_at_ms is null;
comment on index ql.runs_retry_offerable_idx is
'Due retries of ql_api.offer_pull_v1, in its order: per pool, retry_wait Runs by retry time.';
create index runs_cancel_pending_idx on ql.runs (cancel_requested_at_ms, id)
  where cancel_requested_at_ms is not null
    and status in ('created', 'queued', 'waiting_approval', 'retry_wait', 'lost');
comment on index ql.runs_cancel_pending_idx is
'Candidates of ql_api.run_cancellation_converge_v1, oldest intent first (Runs no Attempt holds in a first pass).';
comment on index ql.runs_history_task_status_idx is
'ql_api.run_list_v1 filtered by task: a status''s range, or (merged over the statuses) the task''s whole history';
comment on index ql.runs_history_status_idx is
'ql_api.run_list_v1 filtered by status, or (merged over the statuses) a Project''s whole history; the old-Run probe '
'of ql_api.retention_maintain_v1';
comment on table ql.run_attempts is
'One try of a Run on one Worker. version bumps with every change of the Attempt; a Lease renewal bumps the Lease''s '
'version only.';

commit;
