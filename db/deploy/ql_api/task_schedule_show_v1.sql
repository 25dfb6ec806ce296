-- Deploy qinglong:ql_api/task_schedule_show_v1 to pg
-- FROZEN COPY of db/functions/ql_api/task_schedule_show_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.task_schedule_show_v1: a task's schedule with its next and its last handled fire times.
create or replace function ql_api.task_schedule_show_v1(p_project_id uuid, p_name text, p_count integer default 5)
returns jsonb
language plpgsql
stable
security definer
set search_path = pg_catalog, pg_temp
as $$
-- Next: the stored next_fire_at_ms, then each ql.cron_next after it (ql.schedule_fires_ahead); last: its last p_count handled fire times
-- (ql.schedule_fires, newest first). Each fire time is given in ms and as an ISO 8601 local time with its
-- UTC offset in the schedule's zone, both computed here.
declare
  v_task uuid;
  v_schedule ql.task_schedules;
  v_next jsonb;
  v_last jsonb;
begin
  if p_project_id is null then return ql.outcome('invalid', 'project_id'); end if;
  if p_name is null or p_name !~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$' then return ql.outcome('invalid', 'name'); end if;
  if p_count is null or p_count not between 1 and 100 then return ql.outcome('invalid', 'limit'); end if;
  perform 1 from ql.projects p where p.id = p_project_id and p.status = 'active';
  if not found then return ql.outcome('not_found', 'project'); end if;
  select t.id into v_task from ql.tasks t where t.project_id = p_project_id and t.name = p_name;
  if v_task is null then return ql.outcome('not_found', 'task'); end if;
  select * into v_schedule from ql.task_schedules s where s.task_id = v_task;
  if v_schedule.task_id is null then
    return jsonb_build_object('status', 'unscheduled', 'taskId', v_task);
  end if;

  select coalesce(jsonb_agg(jsonb_build_object(
           'atMs', f.at_ms, 'local', ql.local_iso(pg_catalog.to_timestamp(f.at_ms / 1000.0), v_schedule.timezone))
           order by f.n), '[]')
    into v_next
    from pg_catalog.unnest(ql.schedule_fires_ahead(v_schedule.cron, v_schedule.timezone, v_schedule.next_fire_at_ms,
                                                   p_count)) with ordinality f(at_ms, n);
  select coalesce(jsonb_agg(jsonb_build_object(
           'fireAtMs', f.fire_at_ms,
           'local', ql.local_iso(pg_catalog.to_timestamp(f.fire_at_ms / 1000.0), v_schedule.timezone),
           'decidedAtMs', f.decided_at_ms, 'outcome', f.outcome, 'runId', f.run_id,
           'blockingRunId', f.blocking_run_id, 'caughtUp', f.caught_up) order by f.fire_at_ms desc), '[]')
    into v_last
    from (select * from ql.schedule_fires f where f.task_id = v_task order by f.fire_at_ms desc limit p_count) f;
  return jsonb_build_object('status', 'scheduled', 'taskId', v_task, 'cron', v_schedule.cron,
                            'timezone', v_schedule.timezone, 'overlap', v_schedule.overlap, 'next', v_next,
                            'last', v_last);
end;
$$;

comment on function ql_api.task_schedule_show_v1(uuid, text, integer) is
'Returns scheduled {taskId, cron, timezone, overlap, next, last} | unscheduled {taskId} | invalid (project_id, '
'name, limit) | not_found (project, task). Raises nothing on input.';

commit;
