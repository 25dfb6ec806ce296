-- Verify qinglong:ql/runs on pg
select id, project_id, task_id, task_revision_id, pool, status, version, event_sequence,
       cancel_requested_at_ms, cancel_reason, attempt_count, current_attempt_id, retry_at_ms
from ql.runs where false;
select id, run_id, attempt_no, status, version, callback_sequence, worker_id, worker_generation,
       offer_id, deadline_at_ms, started_at_ms, ended_at_ms, exit_code, error_code
from ql.run_attempts where false;
select attempt_id, lease_generation, token_digest, version, renewed_at_ms, expires_at_ms from ql.run_leases where false;
-- ql.offers: folded into ql.run_attempts by ql/offer_in_attempt (its verify checks the columns).
select run_id, sequence, event_id, dedupe_key, type, actor_kind, actor_id, attempt_id, payload, occurred_at_ms
from ql.run_events where false;
select id, attempt_id, kind, sha256, size, content from ql.artifacts where false;
