-- ql.task_write_fence: the checks every task change of the user API makes first, then its policy fence (task.write).
-- Lock order: ql.policy_fence's: project (FOR SHARE) → role binding (read).
create or replace function ql.task_write_fence(
  p_subject_id uuid,
  p_project_id uuid,
  p_admitted_project_version bigint,
  p_admitted_binding_version bigint
)
returns jsonb
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
-- NULL when the admitted subject may still change the Project's tasks (then the caller acts); otherwise the outcome
-- it answers: invalid (subject_id, project_id, admitted_version) or ql.policy_fence's (not_found project, fenced).
-- Used by ql_api.task_revision_create_v1, task_status_change_v1 and task_schedule_change_v1.
begin
  if p_subject_id is null then return ql.outcome('invalid', 'subject_id'); end if;
  if p_project_id is null then return ql.outcome('invalid', 'project_id'); end if;
  if p_admitted_project_version is null or p_admitted_binding_version is null then
    return ql.outcome('invalid', 'admitted_version');
  end if;
  return ql.policy_fence(p_subject_id, p_project_id, 'task.write', p_admitted_project_version,
                         p_admitted_binding_version);
end;
$$;

comment on function ql.task_write_fence(uuid, uuid, bigint, bigint) is
'Returns NULL (the change may go on) | invalid (subject_id, project_id, admitted_version) | ql.policy_fence''s '
'outcomes. Raises nothing on input.';
