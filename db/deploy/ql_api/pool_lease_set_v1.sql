-- Deploy qinglong:ql_api/pool_lease_set_v1 to pg
-- FROZEN COPY of db/functions/ql_api/pool_lease_set_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.pool_lease_set_v1: set (or, with NULL, clear) the Lease length of a pool's Attempts (operators).
-- Lock order: the pool's ql.pool_settings row (insert or update; a clear deletes it).
create or replace function ql_api.pool_lease_set_v1(p_pool text, p_lease_ms bigint)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- A longer Lease lets the pool's Workers ride out a longer loss of the control plane (a task keeps running until
-- its local Lease expiry); a shorter one recovers a dead Worker's Runs sooner (lease-expiry recovery waits for the
-- Lease to expire). The length applies to Attempts claimed after the change (ql.lease_ttl_ms, kept on each Lease);
-- a plan's leaseMs overrides it. NULL clears it: the pool takes ql.settings.lease_ttl_ms again. Any pool name may
-- be set before a Worker or a task names it. Out of range or a bad name is invalid and changes nothing.
declare
  v_old bigint;
  v_default bigint;
begin
  if p_pool is null or p_pool !~ '^[a-z0-9_-]{1,64}$' then return ql.outcome('invalid', 'pool'); end if;
  if p_lease_ms is not null and p_lease_ms not between 1000 and 3600000 then
    return ql.outcome('invalid', 'lease_ms')
      || jsonb_build_object('detail', 'a Lease length is 1000 to 3600000 ms');
  end if;
  select s.lease_ttl_ms into v_default from ql.settings s;
  select p.lease_ttl_ms into v_old from ql.pool_settings p where p.pool = p_pool for update;
  if p_lease_ms is null then
    delete from ql.pool_settings p where p.pool = p_pool;
  else
    insert into ql.pool_settings (pool, lease_ttl_ms, updated_at_ms) values (p_pool, p_lease_ms, ql.now_ms())
    on conflict (pool) do update set lease_ttl_ms = excluded.lease_ttl_ms, updated_at_ms = excluded.updated_at_ms
     where ql.pool_settings.lease_ttl_ms <> excluded.lease_ttl_ms;
  end if;
  return jsonb_build_object(
    'status', case when p_lease_ms is null then 'cleared' else 'set' end,
    'pool', p_pool,
    'leaseMs', coalesce(p_lease_ms, v_default),
    'poolOwn', p_lease_ms is not null,
    'changed', v_old is distinct from p_lease_ms);
end;
$$;

comment on function ql_api.pool_lease_set_v1(text, bigint) is
'Returns set | cleared {pool, leaseMs (the length now in force), poolOwn, changed} | invalid (pool, lease_ms). '
'Raises nothing on input.';

commit;
