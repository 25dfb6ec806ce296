-- Deploy qinglong:ql/policy_fence to pg
-- FROZEN COPY of db/functions/ql/policy_fence.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql.policy_fence: re-verify an admitted user mutation inside the mutating transaction (decision 0000 (ADR-0118 §6)).
-- Lock order: project (FOR SHARE: a policy change updates the project row and waits for, or is waited on by, this
--   transaction) → role binding (read); the caller then locks the Run.
create or replace function ql.policy_fence(
  p_subject_id uuid,
  p_project_id uuid,
  p_permission text,
  p_admitted_project_version bigint,
  p_admitted_binding_version bigint
)
returns jsonb
language plpgsql
volatile
as $$
-- Admission said "allow" for (subject, project, permission) at some project and binding version;
-- between admission and now the project may have been archived or re-versioned, the binding revoked
-- or its role changed.
-- The most specific reason wins: a revoked or changed binding is named as such, although every
-- binding change also moves the project version. NULL admitted versions never pass.
declare
  v_project ql.projects;
  v_subject ql.subjects;
  v_binding ql.role_bindings;
begin
  select * into v_project from ql.projects p where p.id = p_project_id for share;
  select * into v_subject from ql.subjects s where s.id = p_subject_id;
  select * into v_binding from ql.role_bindings b where b.project_id = p_project_id and b.subject_id = p_subject_id;
  return case
    when v_project.id is null or v_subject.id is null or v_binding.project_id is null
      then ql.outcome('not_found', 'project')
    when v_subject.status <> 'active' then ql.outcome('fenced', 'subject_disabled')
    when v_project.status <> 'active' then ql.outcome('fenced', 'project_archived')
    when not v_binding.active then ql.outcome('fenced', 'binding_revoked')
    when v_binding.version is distinct from p_admitted_binding_version then ql.outcome('fenced', 'binding_changed')
    when v_project.version is distinct from p_admitted_project_version then ql.outcome('fenced', 'project_changed')
    when not ql.role_allows(v_binding.role, p_permission) then ql.outcome('fenced', 'role_insufficient')
    when v_subject.kind = 'agent' and p_permission = 'run.stop' then ql.outcome('fenced', 'approval_required')
  end;
end;
$$;

comment on function ql.policy_fence(uuid, uuid, text, bigint, bigint) is
'Returns NULL when the admission still holds, else not_found (project) | fenced (subject_disabled, '
'project_archived, project_changed, binding_revoked, binding_changed, role_insufficient, approval_required). '
'Never raises.';

commit;
