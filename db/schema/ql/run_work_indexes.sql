-- Partial indexes for the two background scans, so a page costs what it returns and not the whole
-- runs table (bench (c): without them every convergence page sorted all 100,000 Runs).
-- Renewals never write these columns, so they stay HOT updates of ql.run_leases.
begin;
set local role ql_owner;

create index runs_cancel_pending_idx on ql.runs ((current_attempt_id is not null), cancel_requested_at_ms, id)
  where cancel_requested_at_ms is not null
    and status in ('created', 'queued', 'waiting_approval', 'retry_wait', 'lost');
comment on index ql.runs_cancel_pending_idx is
'Candidates of ql_api.run_cancellation_converge_v1, in its order: Runs no Attempt holds first, then oldest intent.';

create index runs_retry_due_idx on ql.runs ((coalesce(retry_at_ms, 0)), id)
  where cancel_requested_at_ms is null and status in ('lost', 'retry_wait');
comment on index ql.runs_retry_due_idx is
'Candidates of the retry step of ql_api.lease_expiry_reconcile_v1: lost Runs and due retry_wait Runs.';

commit;
