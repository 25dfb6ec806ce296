-- Deploy qinglong:ql_api/task_schedule_set_v1 to pg
-- FROZEN COPY of db/functions/ql_api/task_schedule_set_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.task_schedule_set_v1: set, change or clear the schedule of a task (docs/operations.md, "Schedules").
-- Lock order: project (FOR SHARE) → task (FOR SHARE) → schedule (FOR NO KEY UPDATE, or the insert) → for a fire time
--   left due, ql.schedule_fire's: project, task (FOR SHARE, already held) → the new Run.
create or replace function ql_api.task_schedule_set_v1(
  p_project_id uuid,
  p_name text,
  p_cron text,
  p_timezone text,
  p_overlap text default 'skip'
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- p_cron: a 5- or 6-field (second first) cron expression (ql.cron_parse), read on the wall clock of p_timezone (an
-- IANA zone name of pg_timezone_names, exactly as listed there: ql.timezone_is_valid); p_overlap: skip (the default:
-- a fire time while a Run of the task is not terminal enqueues nothing) or allow. A NULL p_cron clears the schedule (the other arguments are
-- then not read). The next fire time is computed from now; changing only the overlap policy keeps it.
-- A fire time of the old schedule that is due (it came, and no scheduler pass has handled it yet) is never dropped:
-- a change or a clear first handles it exactly as the scheduler would (ql.schedule_fire: a Run, or a recorded skip,
-- under the old expression and overlap policy, exactly once), then applies. An unchanged call leaves it to the
-- scheduler. The row lock serialises this with a scheduler pass: one handles the fire time, the other finds it
-- handled.
declare
  v_parsed record;
  v_cron text := pg_catalog.btrim(p_cron, E' \t');
  v_task uuid;
  v_current ql.task_schedules;
  v_now bigint;
  v_next bigint;
begin
  if p_project_id is null then return ql.outcome('invalid', 'project_id'); end if;
  if p_name is null or p_name !~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$' then return ql.outcome('invalid', 'name'); end if;
  if p_cron is not null then
    select * into v_parsed from ql.cron_parse(v_cron);
    if v_parsed.refusal is not null then return v_parsed.refusal; end if;
    if not ql.timezone_is_valid(p_timezone) then return ql.outcome('invalid', 'timezone'); end if;
    if p_overlap is null or p_overlap not in ('skip', 'allow') then return ql.outcome('invalid', 'overlap'); end if;
  end if;

  perform 1 from ql.projects p where p.id = p_project_id and p.status = 'active' for share;
  if not found then return ql.outcome('not_found', 'project'); end if;
  select t.id into v_task from ql.tasks t where t.project_id = p_project_id and t.name = p_name for share;
  if v_task is null then return ql.outcome('not_found', 'task'); end if;
  select * into v_current from ql.task_schedules s where s.task_id = v_task for no key update;

  if p_cron is null then
    if v_current.task_id is null then
      return jsonb_build_object('status', 'unchanged', 'taskId', v_task);
    end if;
    if v_current.next_fire_at_ms <= ql.now_ms() then perform ql.schedule_fire(v_current); end if;
    delete from ql.task_schedules s where s.task_id = v_task;
    return jsonb_build_object('status', 'cleared', 'taskId', v_task);
  end if;

  if (v_current.cron, v_current.timezone, v_current.overlap) is not distinct from (v_cron, p_timezone, p_overlap) then
    return jsonb_build_object('status', 'unchanged', 'taskId', v_task, 'cron', v_current.cron,
                              'timezone', v_current.timezone, 'overlap', v_current.overlap,
                              'nextFireAtMs', v_current.next_fire_at_ms);
  end if;
  v_now := ql.now_ms();
  if v_current.next_fire_at_ms <= v_now then
    perform ql.schedule_fire(v_current);
    select * into v_current from ql.task_schedules s where s.task_id = v_task;
  end if;
  if (v_current.cron, v_current.timezone) is not distinct from (v_cron, p_timezone) then
    v_next := v_current.next_fire_at_ms;  -- only the overlap policy changes: the cursor stays
  else
    v_next := (extract(epoch from ql.cron_next(v_parsed.spec, p_timezone,
                                               pg_catalog.to_timestamp(v_now / 1000.0))) * 1000)::bigint;
  end if;
  insert into ql.task_schedules as s (task_id, project_id, cron, timezone, overlap, next_fire_at_ms, created_at_ms,
                                      updated_at_ms)
  values (v_task, p_project_id, v_cron, p_timezone, p_overlap, v_next, v_now, v_now)
  on conflict (task_id) do update
    set cron = excluded.cron, timezone = excluded.timezone, overlap = excluded.overlap,
        next_fire_at_ms = excluded.next_fire_at_ms, updated_at_ms = excluded.updated_at_ms;
  return jsonb_build_object('status', 'set', 'taskId', v_task, 'cron', v_cron, 'timezone', p_timezone,
                            'overlap', p_overlap, 'nextFireAtMs', v_next);
end;
$$;

comment on function ql_api.task_schedule_set_v1(uuid, text, text, text, text) is
'Returns set | unchanged {taskId, cron, timezone, overlap, nextFireAtMs} | cleared | unchanged {taskId} | '
'invalid (project_id, name, cron, cron_never_fires, timezone, overlap; with a detail) | not_found (project, '
'task). Raises nothing on input.';

commit;
