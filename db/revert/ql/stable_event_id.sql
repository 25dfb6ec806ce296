-- Revert qinglong:ql/stable_event_id from pg
-- RESTORES the previous instance: the body of deploy/ql/stable_event_id@v0.1.0.sql with its grants,
-- written by scripts/sync_functions.py; never edit this one.
begin;
set local role ql_owner;
revoke all on function ql.stable_event_id(text, uuid, uuid, bigint) from public, ql_runtime, ql_scheduler, ql_readonly;

-- ql.stable_event_id: an event id that a retried convergence computes again: the first 128 bits of
-- SHA-256 over a domain string, the Run, the Attempt (or nothing) and the cancel timestamp (seed ADR-0118 §7).
-- signature: ql.stable_event_id(text, uuid, uuid, bigint)
create or replace function ql.stable_event_id(p_domain text, p_run_id uuid, p_attempt_id uuid, p_cancel_at_ms bigint)
returns uuid
language sql
immutable
parallel safe
return pg_catalog.encode(pg_catalog.substr(pg_catalog.sha256(pg_catalog.convert_to(
  p_domain || '|' || p_run_id::text || '|' || coalesce(p_attempt_id::text, '-') || '|' || p_cancel_at_ms::text,
  'UTF8')), 1, 16), 'hex')::uuid;

comment on function ql.stable_event_id(text, uuid, uuid, bigint) is
'First 128 bits of SHA-256(domain|run|attempt|cancel_at_ms) as a uuid. Deterministic; never raises.';

commit;
