-- ql.lease_ttl_ms: the Lease length of an Attempt of a Run in p_pool pinned to revision p_revision, resolved by the
-- pull (docs/decisions/0028-lease-length-per-pool.md).
create or replace function ql.lease_ttl_ms(p_pool text, p_revision uuid)
returns bigint
language plpgsql
stable
as $$
-- The revision's plan leaseMs (ql.plan_is_valid bounds it), else the pool's ql.pool_settings.lease_ttl_ms, else
-- ql.settings.lease_ttl_ms: each in 1000..3600000 by its CHECK.
-- PL/pgSQL, not SQL: a SQL function with sub-selects is not inlined, and its body was planned again on every call
-- (about 90 µs of a pull); PL/pgSQL plans it once per session.
begin
  return coalesce(
    (select (t.plan_json ->> 'leaseMs')::bigint from ql.task_execution_revisions t where t.id = p_revision),
    (select p.lease_ttl_ms from ql.pool_settings p where p.pool = p_pool),
    (select s.lease_ttl_ms from ql.settings s));
end;
$$;

comment on function ql.lease_ttl_ms(text, uuid) is
'Returns the Lease length in ms: the plan''s leaseMs, else the pool''s, else the global one. Never raises.';
