-- Deploy qinglong:ql_api/retention_cycle_v1 to pg
-- FROZEN COPY of db/functions/ql_api/retention_cycle_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.retention_cycle_v1: record one cycle of ql_api.retain with the backlog it left; forget cycles past 35 days.
create or replace function ql_api.retention_cycle_v1(
  p_started_at_ms bigint,
  p_pages integer,
  p_runs_pruned bigint,
  p_finished boolean
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- The backlog is the terminal Runs that ended before the cutoff (ql.runs_ended_idx, an index-only count stopped at
-- 10,000,000); 0 when run_retention_days is NULL. ql.retention_status reads these rows.
declare
  v_now bigint := ql.now_ms();
  v_backlog bigint;
begin
  if p_started_at_ms is null or p_started_at_ms not between 0 and v_now or p_pages is null or p_pages < 0
     or p_runs_pruned is null or p_runs_pruned < 0 or p_finished is null then
    raise exception using errcode = '22023', message = 'ql_api.retention_cycle_v1: a cycle out of range';
  end if;
  select pg_catalog.count(*) into v_backlog
    from (select from ql.runs r, ql.settings st
           where r.ended_at_ms < v_now - st.run_retention_days::bigint * 86400000 limit 10000000) b;
  insert into ql.retention_cycles (started_at_ms, ended_at_ms, pages, runs_pruned, backlog_runs, finished)
  values (p_started_at_ms, v_now, p_pages, p_runs_pruned, v_backlog, p_finished);
  delete from ql.retention_cycles c where c.ended_at_ms < v_now - 35 * 86400000::bigint;
  return jsonb_build_object('status', 'ok', 'backlogRuns', v_backlog);
end;
$$;

comment on function ql_api.retention_cycle_v1(bigint, integer, bigint, boolean) is
'Returns ok {backlogRuns}. Raises 22023 for a start outside 0..now, negative counts or a NULL.';
grant execute on function ql_api.retention_cycle_v1(bigint, integer, bigint, boolean) to ql_scheduler;

commit;
