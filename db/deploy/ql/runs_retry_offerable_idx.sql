-- Deploy qinglong:ql/runs_retry_offerable_idx to pg
-- FROZEN COPY of db/schema/ql/runs_retry_offerable_idx.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
-- The offer index of due retries, beside runs_offerable_idx (queued Runs): per pool, every retry_wait
-- Run no Attempt holds and no intent stops, by (retry_at_ms, id). ql_api.offer_pull_v1 reads the range
-- retry_at_ms <= now in that order, so the oldest due retry is one index probe however many retries of
-- the pool are not yet due.
begin;
set local role ql_owner;

create index runs_retry_offerable_idx on ql.runs (pool, retry_at_ms, id)
  where status = 'retry_wait' and current_attempt_id is null and cancel_requested_at_ms is null;
comment on index ql.runs_retry_offerable_idx is
'Due retries of ql_api.offer_pull_v1, in its order: per pool, retry_wait Runs by retry time.';

commit;
