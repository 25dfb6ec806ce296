-- ql_api.task_create_v1: create a task of a Project, or give an existing one a new immutable revision.
-- Lock order: project (FOR SHARE) → the secrets the plan names (FOR SHARE) → the bundle it names (FOR KEY SHARE) →
--   task (FOR NO KEY UPDATE).
-- The instance before p_plan_signature took (uuid, text, jsonb): dropped, so that a call naming three arguments
-- finds one function.
drop function if exists ql_api.task_create_v1(uuid, text, jsonb);
create or replace function ql_api.task_create_v1(
  p_project_id uuid,
  p_name text,
  p_plan jsonb,
  p_plan_signature jsonb default null
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- The new revision becomes the task's current one; Runs already queued keep the revision they pinned. A plan names
-- secrets, never values: each must be a current secret of the Project (not_found secret, its name as detail); the
-- versions are chosen later, at each Attempt's starting ACK (ql_api.attempt_activation_v1). A plan's bundle must be a
-- complete stored bundle (not_found bundle, its digest as detail); its row is held FOR KEY SHARE until this
-- transaction ends, so ql_api.prune_v1 (which deletes only bundles no revision names, FOR UPDATE SKIP LOCKED, then
-- checks again) either sees this revision or has deleted the bundle before this call found it.
-- p_plan_signature: NULL (unsigned) or an operator's signature {keyId, signature} (ql.plan_signature_is_valid),
-- stored with the revision and delivered with every offer of a Run that pins it. No revision is ever reused: every
-- call adds one, the same plan included, so a revision's signature is exactly the one given with its plan. Signing a
-- plan again (another key, or a signature added to an unsigned plan) is a new revision; a Run keeps the revision,
-- and so the signature, it pinned.
declare
  v_task uuid;
  v_revision uuid;
  v_status text := 'revised';
  v_missing text;
begin
  if p_project_id is null then return ql.outcome('invalid', 'project_id'); end if;
  if p_name is null or p_name !~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$' then return ql.outcome('invalid', 'name'); end if;
  if ql.name_is_uuid(p_name) then
    return ql.outcome('invalid', 'name') || jsonb_build_object('detail', 'a name that reads as a uuid would be taken for an id');
  end if;
  if p_plan is null or not ql.plan_is_valid(p_plan) then return ql.outcome('invalid', 'plan'); end if;
  if p_plan_signature is not null and not ql.plan_signature_is_valid(p_plan_signature) then
    return ql.outcome('invalid', 'plan_signature');
  end if;
  perform 1 from ql.projects p where p.id = p_project_id and p.status = 'active' for share;
  if not found then return ql.outcome('not_found', 'project'); end if;
  perform 1 from ql.secrets s
   where s.project_id = p_project_id and s.name = any (ql.plan_secret_names(p_plan)) and s.current_version > 0
     for share;
  select n into v_missing from unnest(ql.plan_secret_names(p_plan)) n
   where not exists (select 1 from ql.secrets s
                      where s.project_id = p_project_id and s.name = n and s.current_version > 0)
   order by n limit 1;
  if v_missing is not null then
    return ql.outcome('not_found', 'secret') || jsonb_build_object('detail', v_missing);
  end if;
  if p_plan ? 'bundle' then
    perform 1 from ql.bundles b where b.digest = p_plan ->> 'bundle' and b.complete for key share;
    if not found then
      return ql.outcome('not_found', 'bundle') || jsonb_build_object('detail', p_plan ->> 'bundle');
    end if;
  end if;

  select t.id into v_task from ql.tasks t where t.project_id = p_project_id and t.name = p_name for no key update;
  if v_task is null then
    insert into ql.tasks (project_id, name) values (p_project_id, p_name) returning id into v_task;
    v_status := 'created';
  end if;
  insert into ql.task_execution_revisions (task_id, project_id, plan_json, plan_signature, executor_revision_id)
  select v_task, p_project_id, p_plan, p_plan_signature, e.id
    from ql.executor_revisions e where e.kind = 'process' and e.version = 1
  returning id into v_revision;
  update ql.tasks t set current_revision_id = v_revision where t.id = v_task;
  return jsonb_build_object('status', v_status, 'taskId', v_task, 'revisionId', v_revision);
end;
$$;

comment on function ql_api.task_create_v1(uuid, text, jsonb, jsonb) is
'Returns created | revised {taskId, revisionId} | invalid (project_id, name, plan, plan_signature; a name that reads '
'as a uuid, ql.name_is_uuid, with a detail) | not_found '
'(project, secret with the first missing name as detail, bundle with the plan''s digest as detail). '
'Raises nothing on input.';
