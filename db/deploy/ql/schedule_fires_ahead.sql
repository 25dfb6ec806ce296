-- Deploy qinglong:ql/schedule_fires_ahead to pg
-- FROZEN COPY of db/functions/ql/schedule_fires_ahead.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql.schedule_fires_ahead: the next p_count fire times (ms) of a schedule as the scheduler will handle them.
create or replace function ql.schedule_fires_ahead(p_cron text, p_timezone text, p_first_ms bigint, p_count integer)
returns bigint[]
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
-- its stored next fire time (p_first_ms, the cursor of ql.task_schedules), then each ql.cron_next after it. How
-- the task list (task_list_v1) shows a schedule's next fire times. Empty when p_first_ms is NULL.
-- Stable: the result depends on the time zone database.
declare
  v_spec ql.cron_spec;
  v_at timestamptz;
  v_fires bigint[] := '{}'::bigint[];
begin
  v_spec := (ql.cron_parse(p_cron)).spec;
  v_at := pg_catalog.to_timestamp(p_first_ms / 1000.0);
  while v_at is not null and pg_catalog.cardinality(v_fires) < p_count loop
    v_fires := pg_catalog.array_append(v_fires, (extract(epoch from v_at) * 1000)::bigint);
    v_at := ql.cron_next(v_spec, p_timezone, v_at);
  end loop;
  return v_fires;
end;
$$;

comment on function ql.schedule_fires_ahead(text, text, bigint, integer) is
'Returns the fire times in order: the stored one, then each ql.cron_next after it; none for a NULL first fire '
'time. Never raises.';

commit;
