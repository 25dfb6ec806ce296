-- ql_api.storage_health_v1: how long the partitions last and whether retention keeps up, for /healthz and /metrics.
create or replace function ql_api.storage_health_v1()
returns jsonb
language plpgsql
stable
security definer
set search_path = pg_catalog, pg_temp
as $$
-- partitionHorizonMs: where the partitions of the table that ends first end (ql.partition_horizon_ms); a write
-- stamped later would fail, so warnings holds partitions.horizon_near once fewer than 300 days are left (the
-- partitions are kept 13 months ahead: about two months without maintenance).
-- retentionBacklogRuns, lastRetentionCycleAtMs and retentionBehindMs are ql.retention_status's (the backlog the last
-- cycle of ql_api.retain left, when, and how long the oldest terminal Run past run_retention_days has waited: 0 for
-- none), and warnings holds retention.behind when its alert is on (a wait over a day).
-- Reads only the catalog and indexes. Granted to ql_runtime: the answer names no object.
declare
  v_now bigint := ql.now_ms();
  v_horizon bigint := ql.partition_horizon_ms();
  v_backlog bigint;
  v_last bigint;
  v_behind bigint;
  v_alert boolean;
  v_warnings text[] := array[]::text[];
begin
  select rs.backlog_runs, rs.last_cycle_at_ms, rs.behind_ms, rs.alert into v_backlog, v_last, v_behind, v_alert
    from ql.retention_status rs;
  if v_horizon is null or v_horizon - v_now < 300 * 86400000::bigint then
    v_warnings := v_warnings || 'partitions.horizon_near'::text;
  end if;
  if v_alert then
    v_warnings := v_warnings || 'retention.behind'::text;
  end if;
  return jsonb_build_object('status', 'ok', 'nowMs', v_now, 'partitionHorizonMs', v_horizon,
                            'retentionBacklogRuns', coalesce(v_backlog, 0), 'lastRetentionCycleAtMs', v_last,
                            'retentionBehindMs', coalesce(v_behind, 0), 'warnings', to_jsonb(v_warnings));
end;
$$;

comment on function ql_api.storage_health_v1() is
'Returns ok {nowMs, partitionHorizonMs, retentionBacklogRuns, lastRetentionCycleAtMs, retentionBehindMs, warnings: '
'partitions.horizon_near | retention.behind}. Never raises.';
grant execute on function ql_api.storage_health_v1() to ql_runtime;
