-- ql.stable_event_id: an event id a retried convergence computes again (decision 0000 (ADR-0118 §7)).
create or replace function ql.stable_event_id(p_domain text, p_run_id uuid, p_attempt_id uuid, p_cancel_at_ms bigint)
returns uuid
language sql
immutable
parallel safe
return pg_catalog.encode(pg_catalog.substr(pg_catalog.sha256(pg_catalog.convert_to(
  p_domain || '|' || p_run_id::text || '|' || coalesce(p_attempt_id::text, '-') || '|' || p_cancel_at_ms::text,
  'UTF8')), 1, 16), 'hex')::uuid;

comment on function ql.stable_event_id(text, uuid, uuid, bigint) is
'Returns the first 128 bits of SHA-256(domain|run|attempt|cancel_at_ms) as a uuid. Never raises.';
