-- Deploy qinglong:ql_api/schedule_tick to pg
-- FROZEN COPY of db/functions/ql_api/schedule_tick.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.schedule_tick: the rest of a minute of the scheduler, second by second, so 6-field (second) schedules fire
-- within about a second of their time although pg_cron starts jobs once a minute.
-- Lock order: ql_api.schedule_fire_v1's, one page per transaction.
create or replace procedure ql_api.schedule_tick(p_until_second numeric default 59.5)
language plpgsql
as $$
-- pg_cron runs it every minute (ql/schedule_tick_schedule). It hands every due fire time to
-- ql_api.schedule_fire_v1 (pages of 128, a COMMIT after each), then sleeps until the next fire time, at least 50 ms
-- and at most a second (a schedule set meanwhile is seen within a second), and goes round again until
-- p_until_second (0..59.9) of the minute it started in: the next minute's run takes over from there. A fire time
-- is thus handled within about a second (the sleep's bound, plus pg_cron's start at the next minute for one that
-- falls in the last half second). ql_api.converge still fires due schedules each minute as well (SKIP LOCKED and
-- ql.schedule_fires' key keep each fire time exactly once), so a deployment without this job loses only the
-- precision. Each sleep is its own short transaction: no snapshot is held across the waits. Under ql_scheduler's
-- statement timeout (60 s) a run started on time ends in time.
declare
  v_end_ms bigint;
  v_page jsonb;
  v_next_ms bigint;
  v_now_ms bigint;
begin
  if p_until_second is null or p_until_second not between 0 and 59.9 then
    raise exception using errcode = '22023',
      message = pg_catalog.format('ql_api.schedule_tick: p_until_second %s is outside 0..59.9', p_until_second);
  end if;
  v_end_ms := (extract(epoch from pg_catalog.date_trunc('minute', pg_catalog.clock_timestamp())) * 1000)::bigint
              + (p_until_second * 1000)::bigint;
  loop
    loop
      v_page := ql_api.schedule_fire_v1(128);
      commit;
      exit when (v_page ->> 'scanned')::integer < 128;
    end loop;
    v_now_ms := (extract(epoch from pg_catalog.clock_timestamp()) * 1000)::bigint;  -- ql.now_ms(), not ours to call
    exit when v_now_ms >= v_end_ms;
    v_next_ms := ql_api.schedule_next_fire_v1();
    perform pg_catalog.pg_sleep(least(greatest(coalesce(v_next_ms, v_now_ms + 1000) - v_now_ms, 50), 1000,
                                      v_end_ms - v_now_ms) / 1000.0);
    commit;
  end loop;
end;
$$;

comment on procedure ql_api.schedule_tick(numeric) is
'Returns nothing; COMMITs after each page and each sleep. Raises 22023 for p_until_second outside 0..59.9.';
grant execute on procedure ql_api.schedule_tick(numeric) to ql_scheduler;

commit;
