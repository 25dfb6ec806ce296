-- ql_api.task_schedule_change_v1: a user sets, changes or clears a task's schedule through the user API.
-- Lock order: project (FOR SHARE, ql.task_write_fence) → ql_api.task_schedule_set_v1's: project (FOR SHARE, already
--   held) → task (FOR SHARE) → schedule (FOR NO KEY UPDATE, or the insert) → for a fire time left due, the new Run.
create or replace function ql_api.task_schedule_change_v1(
  p_subject_id uuid,
  p_project_id uuid,
  p_name text,
  p_cron text,
  p_timezone text,
  p_overlap text,
  p_admitted_project_version bigint,
  p_admitted_binding_version bigint
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- The admitted policy (task.write) is re-verified first; then the schedule is set exactly as an operator's `task
-- schedule set` / `clear` sets it (ql_api.task_schedule_set_v1: a 5- or 6-field cron expression in an IANA zone, the
-- overlap policy; a NULL p_cron clears it; a fire time the old schedule left due is handled first). The same schedule
-- again is unchanged, so a repeated call needs no mutation id.
declare
  v_fence jsonb;
begin
  v_fence := ql.task_write_fence(p_subject_id, p_project_id, p_admitted_project_version, p_admitted_binding_version);
  if v_fence is not null then return v_fence; end if;
  return ql_api.task_schedule_set_v1(p_project_id, p_name, p_cron, p_timezone, coalesce(p_overlap, 'skip'));
end;
$$;

comment on function ql_api.task_schedule_change_v1(uuid, uuid, text, text, text, text, bigint, bigint) is
'Returns set | unchanged {taskId, cron, timezone, overlap, nextFireAtMs} | cleared | unchanged {taskId} | invalid '
'(subject_id, project_id, admitted_version, and task_schedule_set_v1''s: name, cron, cron_never_fires, timezone, '
'overlap) | not_found (project, task) | fenced (ql.policy_fence reasons). Raises nothing on input.';
grant execute on function ql_api.task_schedule_change_v1(uuid, uuid, text, text, text, text, bigint, bigint) to ql_runtime;
