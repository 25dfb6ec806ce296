-- State and enum values as text domains: a CHECK each, one comment each, and a new value is an
-- ALTER DOMAIN rather than an enum rewrite.
begin;
set local role ql_owner;

create domain ql.run_status as text check (value in (
  'created', 'queued', 'waiting_approval', 'retry_wait', 'lost',
  'running', 'succeeded', 'failed', 'cancelled', 'timed_out'));
comment on domain ql.run_status is
'created: recorded, not yet queued | queued: offerable (an Attempt may hold a claim on it) | '
'waiting_approval: an agent''s request awaits a human | retry_wait: an Attempt ended without success, '
'the next one is due at retry_at_ms | lost: the running Attempt''s Lease expired (not terminal: retry may requeue) | '
'running: an Attempt passed the start barrier (starting ACK) | succeeded, failed, cancelled, timed_out: terminal';

create domain ql.attempt_status as text check (value in (
  'claimed', 'starting', 'running', 'succeeded', 'failed', 'cancelled', 'timed_out', 'lost', 'abandoned'));
comment on domain ql.attempt_status is
'claimed: offered to a Worker, Lease = offer expiry | starting: starting ACK, deadline pinned (the start barrier) | '
'running: the process exists | succeeded, failed, cancelled, timed_out: ended by completion, start failure or convergence | '
'lost: Lease expired after the start barrier | abandoned: claim expired before the start barrier';

create domain ql.cancel_reason as text check (value in ('user', 'timeout', 'policy', 'shutdown', 'reconcile'));
comment on domain ql.cancel_reason is
'user: a subject''s cancellation API call | timeout: the pinned deadline passed (written by lease control) | '
'policy, shutdown, reconcile: system intents (reserved for the control plane; never chosen by a caller)';

create domain ql.actor_kind as text check (value in ('user', 'agent', 'system', 'worker', 'reconciler'));
comment on domain ql.actor_kind is 'Who caused an event: a user or agent subject, a Worker, or the control plane itself.';

create domain ql.ms as bigint check (value >= 0 and value <= 9007199254740991);
comment on domain ql.ms is 'Milliseconds since the epoch (or a duration), read from the database clock; 0..2^53-1 so JSON keeps it exact.';

create domain ql.sha256 as bytea check (pg_catalog.octet_length(value) = 32);
comment on domain ql.sha256 is 'A SHA-256 digest. Raw tokens never reach the database; only these do.';

commit;
