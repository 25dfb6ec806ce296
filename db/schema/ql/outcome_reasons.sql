-- The catalogue of non-success outcomes {"status", "reason"}: one enum type per status, listing every
-- reason any ql/ql_api function returns. ql.outcome casts to them, so an unknown status or reason
-- raises instead of leaving the database. qinglong.wire.errors (FENCE_REASONS, INVALID_REASONS) and
-- qinglong.wire.offer (EmptyReason) mirror them exactly, in this order
-- (tests/integration/db/test_wire_catalogue.py). A new reason is an ALTER TYPE … ADD VALUE.
begin;
set local role ql_owner;

create type ql.outcome_status as enum ('invalid', 'not_found', 'fenced', 'empty');
comment on type ql.outcome_status is
'invalid: an input the function refuses | not_found: a missing object (or another Project''s or Worker''s) | '
'fenced: a stale or conflicting caller (Worker fence, policy fence, replay conflict) | empty: nothing to offer';

create type ql.fence_reason as enum (
  'worker_disabled', 'certificate_mismatch', 'stale_session', 'session_expired', 'stale_generation',
  'identity_mismatch', 'stale_lease_generation', 'token_mismatch', 'lease_expired', 'state_drift',
  'stale_version', 'completion_conflict', 'artifact_mismatch', 'artifact_conflict', 'subject_disabled',
  'project_archived', 'project_changed', 'binding_revoked', 'binding_changed', 'role_insufficient',
  'approval_required', 'mutation_conflict', 'token_in_use');
comment on type ql.fence_reason is 'Every reason of a {"status": "fenced"} outcome.';

create type ql.invalid_reason as enum (
  'phase', 'worker_id', 'session_id', 'worker_generation', 'cert_fingerprint', 'capacity', 'token_digest',
  'project_id', 'run_id', 'attempt_id', 'offer_id', 'lease_generation', 'expected_version', 'lease_version',
  'exit_code', 'error_code', 'artifacts', 'kind', 'sha256', 'size', 'too_large', 'sha256_mismatch',
  'subject_id', 'task_id', 'mutation_id', 'admitted_version', 'permission', 'route', 'request_id', 'role',
  'active', 'name', 'pool', 'plan', 'empty_token', 'limit', 'grace_ms');
comment on type ql.invalid_reason is 'Every reason of a {"status": "invalid"} outcome: the input (or check) refused.';

create type ql.empty_reason as enum ('no_work', 'at_capacity', 'pull_spent');
comment on type ql.empty_reason is 'Every reason of offer_pull_v1''s {"status": "empty"} answer.';

create type ql.not_found_reason as enum ('offer', 'project', 'run', 'subject', 'task', 'worker');
comment on type ql.not_found_reason is 'Every reason of a {"status": "not_found"} outcome: what is missing.';

commit;
