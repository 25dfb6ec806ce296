-- Deploy qinglong:ql_api/schedule_fire_v1 to pg
-- FROZEN COPY of db/functions/ql_api/schedule_fire_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.schedule_fire_v1: one scheduler page: each due fire time handled exactly once, missed ones folded.
-- Lock order: schedule (FOR NO KEY UPDATE SKIP LOCKED) → project (FOR SHARE) → task (FOR SHARE) → the new Run.
create or replace function ql_api.schedule_fire_v1(p_limit integer)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- Due schedules (next_fire_at_ms <= now), most overdue first, FOR NO KEY UPDATE SKIP LOCKED so schedulers running
-- at once split the work. ql_api.converge calls it after its other pages; pg_cron runs that every minute.
-- For each schedule, its due fire time (next_fire_at_ms) is handled exactly once by ql.schedule_fire (the one
-- handling, shared with ql_api.task_schedule_set_v1, which handles the fire time a change leaves due before it
-- changes the schedule): a Run (enqueued) or a recorded skip (skipped_overlap, skipped_inactive), the fire row
-- written before the Run (a duplicate queues nothing), the cursor moved past now in the same transaction, missed
-- fire times folded into the one handled (caught_up = true), never run once each.
declare
  v_now bigint;
  v_schedule ql.task_schedules;
  v_scanned integer := 0;
  v_enqueued integer := 0;
  v_skipped integer := 0;
  v_duplicates integer := 0;
begin
  if p_limit is null or p_limit not between 1 and 128 then return ql.outcome('invalid', 'limit'); end if;
  v_now := ql.now_ms();
  for v_schedule in
    select * from ql.task_schedules s
     where s.next_fire_at_ms <= v_now
     order by s.next_fire_at_ms, s.task_id
     limit p_limit
     for no key update skip locked
  loop
    v_scanned := v_scanned + 1;
    case ql.schedule_fire(v_schedule)
      when 'enqueued' then v_enqueued := v_enqueued + 1;
      when 'skipped' then v_skipped := v_skipped + 1;
      else v_duplicates := v_duplicates + 1;
    end case;
  end loop;
  return jsonb_build_object('status', 'ok', 'scanned', v_scanned, 'enqueued', v_enqueued, 'skipped', v_skipped,
                            'duplicates', v_duplicates);
end;
$$;

comment on function ql_api.schedule_fire_v1(integer) is
'Returns ok {scanned, enqueued, skipped, duplicates} | invalid (limit: 1..128). Raises QLBUG when a stored '
'expression no longer parses.';
grant execute on function ql_api.schedule_fire_v1(integer) to ql_scheduler;

commit;
