-- ql.admission_reason: why admission decides as it does for an active subject bound to an existing Project.
create or replace function ql.admission_reason(p_project_status text, p_role text, p_subject_kind text, p_permission text)
returns text
language sql
immutable
parallel safe
-- Its tests, in order:
--   project.archived         a Project that is not active allows reads only (run.read, secret.read)
--   role.insufficient        the binding's role does not grant the permission (ql.role_allows)
--   agent.approval_required  an agent asking run.stop needs a human's approval
--   ok                       allowed
-- (An unknown subject, a missing Project or no active binding is decided before: project.not_found.)
return case
  when p_project_status <> 'active' and p_permission not in ('run.read', 'secret.read') then 'project.archived'
  when not ql.role_allows(p_role, p_permission) then 'role.insufficient'
  when p_subject_kind = 'agent' and p_permission = 'run.stop' then 'agent.approval_required'
  else 'ok'
end;

comment on function ql.admission_reason(text, text, text, text) is
'Returns project.archived | role.insufficient | agent.approval_required | ok. Never raises.';
