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
-- For each schedule, its due fire time (next_fire_at_ms) is handled exactly once:
-- * the row lock and the advance of next_fire_at_ms past now in the same transaction mean a second scheduler
--   skips the row while it is locked and finds it no longer due after the commit;
-- * and the primary key of ql.schedule_fires (task_id, fire_at_ms) is written BEFORE the Run: a fire time that
--   somehow comes round again (the cursor restored by hand, a bug) conflicts, counts as a duplicate and queues
--   nothing.
-- Missed fire times (the scheduler did not run, or ran late): the one due fire time is handled once, and the
-- next one is computed from now, so the fire times in between are folded into it (caught_up = true), never
-- run once each.
-- Outcomes: enqueued (a Run, exactly as ql_api.run_enqueue_v1 queues one: status queued, pinned to the task's
-- current revision, event run.queued, here with actor system and the fire time in its payload);
-- skipped_overlap (the schedule says skip and a Run of the task is not terminal); skipped_inactive (the
-- Project is archived, the task is disabled, or it has no current revision). Skips are rows of ql.schedule_fires.
-- A stored expression that no longer parses is a bug (QLBUG): ql_api.task_schedule_set_v1 stores only what
-- ql.cron_parse accepts.
declare
  v_now bigint;
  v_at bigint;
  v_schedule ql.task_schedules;
  v_parsed record;
  v_next bigint;
  v_caught_up boolean;
  v_active boolean;
  v_revision ql.task_execution_revisions;
  v_blocker uuid;
  v_outcome text;
  v_run uuid;
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
    v_at := ql.now_ms();
    select * into v_parsed from ql.cron_parse(v_schedule.cron);
    if v_parsed.refusal is not null then
      raise exception using errcode = 'QLBUG', message = pg_catalog.format(
        'ql_api.schedule_fire_v1: the stored schedule of task %s does not parse: %s', v_schedule.task_id, v_parsed.refusal);
    end if;
    -- The fire time after this one; when that has passed too, the next one after now (missed ones fold in).
    v_next := (extract(epoch from ql.cron_next(v_parsed.spec, v_schedule.timezone,
                                               pg_catalog.to_timestamp(v_schedule.next_fire_at_ms / 1000.0))) * 1000)::bigint;
    v_caught_up := v_next <= v_at;
    if v_caught_up then
      v_next := (extract(epoch from ql.cron_next(v_parsed.spec, v_schedule.timezone,
                                                 pg_catalog.to_timestamp(v_at / 1000.0))) * 1000)::bigint;
    end if;

    select p.status = 'active' into v_active from ql.projects p where p.id = v_schedule.project_id for share;
    v_active := coalesce(v_active, false);
    select r.* into v_revision
      from ql.tasks t join ql.task_execution_revisions r on r.id = t.current_revision_id
     where t.id = v_schedule.task_id and t.status = 'active'
       for share of t;
    v_blocker := null;
    v_run := null;
    if not v_active or v_revision.id is null then
      v_outcome := 'skipped_inactive';
    else
      if v_schedule.overlap = 'skip' then
        -- Served by ql.runs_task_live_idx: the planner inlines ql.is_terminal, so this matches the index's predicate,
        -- which spells the four statuses out (an index predicate stays literal: replacing the function would not
        -- rebuild the index).
        select r.id into v_blocker from ql.runs r
         where r.task_id = v_schedule.task_id and not ql.is_terminal(r.status)
         limit 1;
      end if;
      if v_blocker is not null then
        v_outcome := 'skipped_overlap';
      else
        v_outcome := 'enqueued';
        v_run := pg_catalog.gen_random_uuid();
      end if;
    end if;

    insert into ql.schedule_fires (task_id, fire_at_ms, project_id, decided_at_ms, outcome, run_id, blocking_run_id,
                                   caught_up)
    values (v_schedule.task_id, v_schedule.next_fire_at_ms, v_schedule.project_id, v_at, v_outcome, v_run, v_blocker,
            v_caught_up)
    on conflict (task_id, fire_at_ms) do nothing;
    if not found then
      v_duplicates := v_duplicates + 1;
    elsif v_run is null then
      v_skipped := v_skipped + 1;
    else
      perform ql.run_create(v_run, v_revision, 'system', null,
                            jsonb_build_object('scheduledFireAtMs', v_schedule.next_fire_at_ms, 'caughtUp', v_caught_up),
                            v_at);
      v_enqueued := v_enqueued + 1;
    end if;
    update ql.task_schedules s set next_fire_at_ms = v_next where s.task_id = v_schedule.task_id;
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
