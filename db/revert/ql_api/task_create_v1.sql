-- Revert qinglong:ql_api/task_create_v1 from pg
-- RESTORES the previous instance: the body of deploy/ql_api/task_create_v1@v0.1.0.sql with its grants,
-- written by scripts/sync_functions.py; never edit this one.
begin;
set local role ql_owner;
drop function ql_api.task_create_v1(uuid, text, jsonb, jsonb);

-- ql_api.task_create_v1: create a task of a Project, or give an existing one a new immutable revision.
-- The new revision becomes the task's current one; Runs already queued keep the revision they pinned.
-- Not granted to ql_runtime (operators call it as a DBA).
-- Lock order: project (FOR SHARE) → task (FOR NO KEY UPDATE).
-- Returns {"status":"created"|"revised","taskId","revisionId"} | {"status":"invalid"|"not_found","reason"}.
-- signature: ql_api.task_create_v1(uuid, text, jsonb)
create or replace function ql_api.task_create_v1(p_project_id uuid, p_name text, p_plan jsonb)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_task uuid;
  v_revision uuid;
  v_status text := 'revised';
begin
  if p_project_id is null then return ql.outcome('invalid', 'project_id'); end if;
  if p_name is null or p_name !~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$' then return ql.outcome('invalid', 'name'); end if;
  if p_plan is null or not ql.plan_is_valid(p_plan) then return ql.outcome('invalid', 'plan'); end if;
  perform 1 from ql.projects p where p.id = p_project_id and p.status = 'active' for share;
  if not found then return ql.outcome('not_found', 'project'); end if;

  select t.id into v_task from ql.tasks t where t.project_id = p_project_id and t.name = p_name for no key update;
  if v_task is null then
    insert into ql.tasks (project_id, name) values (p_project_id, p_name) returning id into v_task;
    v_status := 'created';
  end if;
  insert into ql.task_execution_revisions (task_id, project_id, plan_json, executor_revision_id)
  select v_task, p_project_id, p_plan, e.id from ql.executor_revisions e where e.kind = 'process' and e.version = 1
  returning id into v_revision;
  update ql.tasks t set current_revision_id = v_revision where t.id = v_task;
  return jsonb_build_object('status', v_status, 'taskId', v_task, 'revisionId', v_revision);
end;
$$;

comment on function ql_api.task_create_v1(uuid, text, jsonb) is
'Creates a task or adds a revision (plan per ql.plan_is_valid) and makes it current. Results: created | revised | '
'invalid (project_id, name, plan) | not_found (project). Operators only.';
revoke all on function ql_api.task_create_v1(uuid, text, jsonb) from public;

commit;
