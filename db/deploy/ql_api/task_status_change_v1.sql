-- Deploy qinglong:ql_api/task_status_change_v1 to pg
-- FROZEN COPY of db/functions/ql_api/task_status_change_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.task_status_change_v1: a user disables or enables a task through the user API.
-- Lock order: project (FOR SHARE, ql.task_write_fence) → task (FOR NO KEY UPDATE, ql_api.task_status_set_v1).
create or replace function ql_api.task_status_change_v1(
  p_subject_id uuid,
  p_project_id uuid,
  p_name text,
  p_active boolean,
  p_admitted_project_version bigint,
  p_admitted_binding_version bigint
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- The admitted policy (task.write) is re-verified first; then the status is set exactly as an operator's `task
-- disable` / `task enable` sets it (ql_api.task_status_set_v1, the task named within the admitted Project). Setting the
-- status it already has changes nothing (changed: false), so a repeated call needs no mutation id.
declare
  v_fence jsonb;
begin
  v_fence := ql.task_write_fence(p_subject_id, p_project_id, p_admitted_project_version, p_admitted_binding_version);
  if v_fence is not null then return v_fence; end if;
  return ql_api.task_status_set_v1(p_project_id::text, p_name, p_active);
end;
$$;

comment on function ql_api.task_status_change_v1(uuid, uuid, text, boolean, bigint, bigint) is
'Returns disabled | enabled {projectId, taskId, name, changed} | invalid (subject_id, project_id, admitted_version, '
'name, active) | not_found (project, task) | fenced (ql.policy_fence reasons). Raises nothing on input.';
grant execute on function ql_api.task_status_change_v1(uuid, uuid, text, boolean, bigint, bigint) to ql_runtime;

commit;
