-- ql_api.pool_list_v1: every pool a Worker or a setting names, with the Lease length its Attempts get (operators).
create or replace function ql_api.pool_list_v1()
returns jsonb
language sql
stable
security definer
set search_path = pg_catalog, pg_temp
-- Per pool, by name: leaseMs (its own, else the global ql.settings.lease_ttl_ms), poolOwn (whether it has its
-- own), workers (enrolled active Workers) and liveRuns (Runs not ended). Reads only.
return (
  select jsonb_build_object('status', 'listed', 'defaultLeaseMs', (select s.lease_ttl_ms from ql.settings s),
    'pools', coalesce(jsonb_agg(jsonb_build_object(
      'pool', n.pool,
      'leaseMs', coalesce(p.lease_ttl_ms, (select s.lease_ttl_ms from ql.settings s)),
      'poolOwn', p.pool is not null,
      'workers', (select count(*) from ql.workers w where w.pool = n.pool and w.status = 'active'),
      'liveRuns', (select count(*) from ql.runs r
                    where r.pool = n.pool and not ql.is_terminal(r.status)))
      order by n.pool), '[]'))
    from (select w.pool from ql.workers w union select p.pool from ql.pool_settings p) n
    left join ql.pool_settings p on p.pool = n.pool);

comment on function ql_api.pool_list_v1() is
'Returns listed {defaultLeaseMs, pools: [{pool, leaseMs, poolOwn, workers, liveRuns}]}. Raises nothing.';
