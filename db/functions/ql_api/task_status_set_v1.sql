-- ql_api.task_status_set_v1: disable or enable a task, named by its id or its name within a Project.
-- Lock order: task (FOR NO KEY UPDATE) only.
create or replace function ql_api.task_status_set_v1(p_project text, p_task text, p_active boolean)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- A disabled task is enqueued neither by users (ql_api.run_enqueue_v1: fenced, task_disabled)
-- nor by the scheduler (ql_api.schedule_fire_v1: skipped_inactive); Runs already queued or running go on. Setting
-- the status it already has changes nothing. Another Project's task is not found. Not granted to ql_runtime
-- (operators call it as a DBA).
declare
  v_uuid constant text := '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$';
  v_wanted text := case when p_active then 'active' else 'disabled' end;
  v_project ql.projects;
  v_task ql.tasks;
begin
  if p_project is null or length(p_project) not between 1 and 200 then return ql.outcome('invalid', 'project_id'); end if;
  if p_task is null or length(p_task) not between 1 and 200 then return ql.outcome('invalid', 'name'); end if;
  if p_active is null then return ql.outcome('invalid', 'active'); end if;
  if p_project ~ v_uuid then select * into v_project from ql.projects p where p.id = p_project::uuid; end if;
  if v_project.id is null then select * into v_project from ql.projects p where p.name = p_project; end if;
  if v_project.id is null then return ql.outcome('not_found', 'project'); end if;
  -- Task names are unique within a Project (unique (project_id, name)); an id is tried first.
  if p_task ~ v_uuid then
    select * into v_task from ql.tasks t where t.id = p_task::uuid and t.project_id = v_project.id for no key update;
  end if;
  if v_task.id is null then
    select * into v_task from ql.tasks t where t.name = p_task and t.project_id = v_project.id for no key update;
  end if;
  if v_task.id is null then return ql.outcome('not_found', 'task'); end if;

  if v_task.status <> v_wanted then
    update ql.tasks t set status = v_wanted where t.id = v_task.id;
  end if;
  return jsonb_build_object('status', case when p_active then 'enabled' else 'disabled' end, 'projectId', v_project.id,
                            'taskId', v_task.id, 'name', v_task.name, 'changed', v_task.status <> v_wanted);
end;
$$;

comment on function ql_api.task_status_set_v1(text, text, boolean) is
'Returns disabled | enabled {projectId, taskId, name, changed} | invalid (project_id, name, active) | not_found '
'(project, task). Raises nothing on input.';
