-- ql_api.partitions_ensure_v1: the monthly partitions of ql.run_events and ql.security_audit, created ahead.
-- Lock order: the advisory lock of each table's creators, then SHARE UPDATE EXCLUSIVE on its parent (ATTACH).
create or replace function ql_api.partitions_ensure_v1(p_months_ahead integer default 13)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- Every month from this one through p_months_ahead months after it gets its partition (ql.partition_ensure): an
-- event or audit row always finds one, also when nothing has run this for a year (13 months ahead, the default).
-- ql_api.converge calls it every minute and ql_api.retain every cycle, each in a transaction of its own (never in
-- the transaction that drops old partitions). A call that finds every partition there only reads the catalog.
-- lock_timeout is 2s for its transaction: creation that cannot attach in time (a DROP of an old partition holds the
-- parent) raises lock_not_available and the next minute tries again.
-- The answer's horizonMs is where the partitions of the table that ends first end (docs/operations.md,
-- "Retention": ql_api.storage_health_v1 warns long before writes could find none).
declare
  v_now bigint;
  v_created integer;
begin
  if p_months_ahead is null or p_months_ahead not between 1 and 24 then
    raise exception using errcode = '22023',
      message = pg_catalog.format('ql_api.partitions_ensure_v1: months ahead %s outside 1..24', p_months_ahead);
  end if;
  perform pg_catalog.set_config('lock_timeout', '2s', true);
  v_now := ql.now_ms();
  v_created := ql.partition_ensure('ql.run_events', v_now, p_months_ahead)
             + ql.partition_ensure('ql.security_audit', v_now, p_months_ahead);
  return jsonb_build_object('status', 'ok', 'created', v_created, 'horizonMs', ql.partition_horizon_ms());
end;
$$;

comment on function ql_api.partitions_ensure_v1(integer) is
'Returns ok {created, horizonMs}. Raises 22023 for p_months_ahead outside 1..24, lock_not_available when a '
'parent stays locked for 2s.';
grant execute on function ql_api.partitions_ensure_v1(integer) to ql_scheduler;
