-- Deploy qinglong:ql_api/retention_maintain_v1 to pg
-- FROZEN COPY of db/functions/ql_api/retention_maintain_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.retention_maintain_v1: the partition step of retention: monthly partitions created ahead, those past retention dropped.
create or replace function ql_api.retention_maintain_v1(p_months_ahead integer default 2)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- Run once a day by ql_api.retain. It
-- 1. creates the monthly partitions of ql.run_events and ql.security_audit through p_months_ahead months after
--    this one (ql.partition_ensure): an event or audit row always finds its partition;
-- 2. drops each security_audit partition whose every row is older than audit_retention_days (its upper bound
--    is at or before the cutoff);
-- 3. drops each run_events partition past run_retention_days that holds no event of a Run still kept
--    (ql_api.prune_v1 deleted them all): a partition is checked under its own ACCESS EXCLUSIVE lock, then dropped.
-- NULL retention keeps that table's partitions. Rows leave only this way: run_events and security_audit refuse
-- UPDATE, DELETE and TRUNCATE for every role.
-- It sets lock_timeout to 2s for the rest of its transaction: a partition whose lock is not granted in time
-- (another transaction reads it) is skipped this time.
declare
  v_now bigint;
  v_run_days integer;
  v_audit_days integer;
  v_created integer;
  v_dropped text[] := array[]::text[];
  v_part record;
  v_kept boolean;
begin
  if p_months_ahead is null or p_months_ahead not between 1 and 12 then
    raise exception using errcode = '22023',
      message = pg_catalog.format('ql_api.retention_maintain_v1: months ahead %s outside 1..12', p_months_ahead);
  end if;
  perform pg_catalog.set_config('lock_timeout', '2s', true);  -- this transaction's (ql_api.retain commits after it)
  v_now := ql.now_ms();
  select st.run_retention_days, st.audit_retention_days into v_run_days, v_audit_days from ql.settings st;
  v_created := ql.partition_ensure('ql.run_events', v_now, p_months_ahead)
             + ql.partition_ensure('ql.security_audit', v_now, p_months_ahead);

  for v_part in
    select i.inhrelid::regclass as part, i.inhparent::regclass as parent,
           (pg_catalog.regexp_match(pg_catalog.pg_get_expr(c.relpartbound, c.oid), 'TO \(''?(\d+)''?\)'))[1]::bigint
             as upper_ms
      from pg_catalog.pg_inherits i
      join pg_catalog.pg_class c on c.oid = i.inhrelid
     where i.inhparent in ('ql.run_events'::regclass, 'ql.security_audit'::regclass)
     order by 3
  loop
    continue when v_part.parent = 'ql.security_audit'::regclass
      and (v_audit_days is null or v_part.upper_ms > v_now - v_audit_days::bigint * 86400000);
    continue when v_part.parent = 'ql.run_events'::regclass
      and (v_run_days is null or v_part.upper_ms > v_now - v_run_days::bigint * 86400000);
    begin
      execute pg_catalog.format('lock table %s in access exclusive mode', v_part.part);
      if v_part.parent = 'ql.run_events'::regclass then
        execute pg_catalog.format('select exists (select 1 from %s e join ql.runs r on r.id = e.run_id)', v_part.part)
          into v_kept;
        continue when v_kept;
      end if;
      v_dropped := v_dropped || v_part.part::text;  -- its name: once dropped, a regclass prints as a number
      execute pg_catalog.format('drop table %s', v_part.part);
    exception when lock_not_available then
      null;
    end;
  end loop;
  return jsonb_build_object('status', 'ok', 'created', v_created, 'dropped', to_jsonb(v_dropped));
end;
$$;

comment on function ql_api.retention_maintain_v1(integer) is
'Returns ok {created, dropped}. Raises 22023 for p_months_ahead outside 1..12.';
grant execute on function ql_api.retention_maintain_v1(integer) to ql_scheduler;

commit;
