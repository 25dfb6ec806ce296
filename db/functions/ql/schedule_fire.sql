-- ql.schedule_fire: handle a schedule's due fire time once (a Run, or a recorded skip) and move its cursor past it.
-- Lock order: (the caller holds the schedule FOR NO KEY UPDATE) → project (FOR SHARE) → task (FOR SHARE) → the new Run.
create or replace function ql.schedule_fire(p_schedule ql.task_schedules)
returns text
language plpgsql
volatile
as $$
-- The one handling of a fire time, shared by the scheduler (ql_api.schedule_fire_v1, for each due schedule) and a
-- schedule change (ql_api.task_schedule_set_v1, for the fire time the old schedule left due): p_schedule is the row
-- as the caller locked it, and its next_fire_at_ms (<= now) is the fire time handled, under p_schedule's own
-- expression and overlap policy.
-- Exactly once: the caller's row lock and the advance of next_fire_at_ms past now in the same transaction mean
-- another caller waits for the row (or skips it) and then finds it no longer due; and the primary key of
-- ql.schedule_fires (task_id, fire_at_ms) is written BEFORE the Run: a fire time that somehow comes round again
-- (the cursor restored by hand, a bug) conflicts, is a duplicate and queues nothing.
-- Missed fire times: the next one is computed from the handled one and, when that has passed too, from now, so the
-- fire times in between fold into this one (caught_up = true), never run once each.
-- Outcomes: enqueued (a Run, exactly as ql_api.run_enqueue_v1 queues one: status queued, pinned to the task's
-- current revision, event run.queued, here with actor system and the fire time in its payload); skipped_overlap
-- (the schedule says skip and a Run of the task is not terminal); skipped_inactive (the Project is archived, the
-- task is disabled, or it has no current revision). Skips are rows of ql.schedule_fires too.
-- A stored expression that no longer parses is a bug (QLBUG): ql_api.task_schedule_set_v1 stores only what
-- ql.cron_parse accepts.
declare
  v_at bigint := ql.now_ms();
  v_parsed record;
  v_next bigint;
  v_caught_up boolean;
  v_active boolean;
  v_revision ql.task_execution_revisions;
  v_blocker uuid;
  v_outcome text;
  v_run uuid;
  v_answer text;
begin
  select * into v_parsed from ql.cron_parse(p_schedule.cron);
  if v_parsed.refusal is not null then
    raise exception using errcode = 'QLBUG', message = pg_catalog.format(
      'ql.schedule_fire: the stored schedule of task %s does not parse: %s', p_schedule.task_id, v_parsed.refusal);
  end if;
  -- The fire time after this one; when that has passed too, the next one after now (missed ones fold in).
  v_next := (extract(epoch from ql.cron_next(v_parsed.spec, p_schedule.timezone,
                                             pg_catalog.to_timestamp(p_schedule.next_fire_at_ms / 1000.0))) * 1000)::bigint;
  v_caught_up := v_next <= v_at;
  if v_caught_up then
    v_next := (extract(epoch from ql.cron_next(v_parsed.spec, p_schedule.timezone,
                                               pg_catalog.to_timestamp(v_at / 1000.0))) * 1000)::bigint;
  end if;

  select p.status = 'active' into v_active from ql.projects p where p.id = p_schedule.project_id for share;
  v_active := coalesce(v_active, false);
  select r.* into v_revision
    from ql.tasks t join ql.task_execution_revisions r on r.id = t.current_revision_id
   where t.id = p_schedule.task_id and t.status = 'active'
     for share of t;
  if not v_active or v_revision.id is null then
    v_outcome := 'skipped_inactive';
  else
    if p_schedule.overlap = 'skip' then
      -- Served by ql.runs_task_live_idx: the planner inlines ql.is_terminal, so this matches the index's predicate,
      -- which spells the four statuses out (an index predicate stays literal: replacing the function would not
      -- rebuild the index).
      select r.id into v_blocker from ql.runs r
       where r.task_id = p_schedule.task_id and not ql.is_terminal(r.status)
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
  values (p_schedule.task_id, p_schedule.next_fire_at_ms, p_schedule.project_id, v_at, v_outcome, v_run, v_blocker,
          v_caught_up)
  on conflict (task_id, fire_at_ms) do nothing;
  if not found then
    v_answer := 'duplicate';
  elsif v_run is null then
    v_answer := 'skipped';
  else
    perform ql.run_create(v_run, v_revision, 'system', null,
                          pg_catalog.jsonb_build_object('scheduledFireAtMs', p_schedule.next_fire_at_ms,
                                                        'caughtUp', v_caught_up),
                          v_at);
    v_answer := 'enqueued';
  end if;
  update ql.task_schedules s set next_fire_at_ms = v_next where s.task_id = p_schedule.task_id;
  return v_answer;
end;
$$;

comment on function ql.schedule_fire(ql.task_schedules) is
'Returns enqueued | skipped | duplicate (the fire time was already handled: nothing queued). Raises QLBUG when the '
'stored expression no longer parses.';
