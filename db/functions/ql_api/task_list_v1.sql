-- ql_api.task_list_v1: the tasks of one Project with their plan summary and schedule.
create or replace function ql_api.task_list_v1(p_project text)
returns jsonb
language plpgsql
stable
security definer
set search_path = pg_catalog, pg_temp
as $$
-- Each with its status, its current plan's summary (argv, pool, timeoutMs, maxAttempts) and its schedule if any,
-- with its next three fire times (ql.schedule_fires_ahead); its current plan in full (plan: what a client starts a
-- new revision from, so that a field it does not edit is kept) and whether that revision is signed.
-- Another Project's tasks never appear. Reads only. Operators call it as a DBA; the user API (`run.read`) calls it with the admitted id.
declare
  v_project ql.projects;
begin
  if p_project is null or length(p_project) not between 1 and 200 then return ql.outcome('invalid', 'project_id'); end if;
  v_project := ql.project_named(p_project);
  if v_project.id is null then return ql.outcome('not_found', 'project'); end if;
  return jsonb_build_object('status', 'listed', 'projectId', v_project.id, 'project', v_project.name, 'tasks',
    (select coalesce(jsonb_agg(jsonb_build_object(
              'taskId', t.id, 'name', t.name, 'status', t.status, 'revisionId', t.current_revision_id,
              'argv', r.plan_json -> 'argv', 'pool', coalesce(r.plan_json ->> 'pool', 'default'),
              'timeoutMs', r.plan_json -> 'timeoutMs', 'maxAttempts', r.plan_json -> 'maxAttempts',
              'plan', r.plan_json, 'signed', r.plan_signature is not null,
              'schedule', case when sc.task_id is not null then jsonb_build_object(
                'cron', sc.cron, 'timezone', sc.timezone, 'overlap', sc.overlap,
                'nextFiresMs', to_jsonb(ql.schedule_fires_ahead(sc.cron, sc.timezone, sc.next_fire_at_ms, 3)))
              end) order by t.name), '[]'::jsonb)
       from ql.tasks t
       left join ql.task_execution_revisions r on r.id = t.current_revision_id
       left join ql.task_schedules sc on sc.task_id = t.id
      where t.project_id = v_project.id));
end;
$$;

comment on function ql_api.task_list_v1(text) is
'Returns listed {projectId, project, tasks} | invalid (project_id) | not_found (project). Raises nothing on '
'input.';
grant execute on function ql_api.task_list_v1(text) to ql_runtime;
