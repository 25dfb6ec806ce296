-- Deploy qinglong:ql_api/project_view_v1 to pg
-- FROZEN COPY of db/functions/ql_api/project_view_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.project_view_v1: what an admitted subject may see and do in one Project (the user API, the web console).
create or replace function ql_api.project_view_v1(p_project_id uuid, p_subject_id uuid)
returns jsonb
language plpgsql
stable
security definer
set search_path = pg_catalog, pg_temp
as $$
-- The answer names the Project (id, name, status), the subject (name, kind), its active role, and, for each of
-- run.read, run.start, run.stop and task.write, the decision request_admission_v1 would take now: allow, deny, or
-- approval_required (an agent asking run.stop). One source of those rules: ql.admission_reason, which admission
-- decides by. A subject without an active binding, or a
-- missing Project, is not_found project (as admission sees it). Reads only.
declare
  v_project ql.projects;
  v_subject ql.subjects;
  v_role text;
begin
  if p_project_id is null then return ql.outcome('invalid', 'project_id'); end if;
  if p_subject_id is null then return ql.outcome('invalid', 'subject_id'); end if;
  select * into v_project from ql.projects p where p.id = p_project_id;
  select * into v_subject from ql.subjects s where s.id = p_subject_id and s.status = 'active';
  select b.role into v_role from ql.role_bindings b
   where b.project_id = p_project_id and b.subject_id = p_subject_id and b.active;
  if v_project.id is null or v_subject.id is null or v_role is null then return ql.outcome('not_found', 'project'); end if;
  return jsonb_build_object(
    'status', 'found', 'projectId', v_project.id, 'project', v_project.name, 'projectStatus', v_project.status,
    'subject', v_subject.name, 'subjectKind', v_subject.kind, 'role', v_role)
    || (select jsonb_object_agg(k.key, case ql.admission_reason(v_project.status, v_role, v_subject.kind, k.permission)
                 when 'ok' then 'allow' when 'agent.approval_required' then 'approval_required' else 'deny' end)
          from (values ('runRead', 'run.read'), ('runStart', 'run.start'), ('runStop', 'run.stop'),
                       ('taskWrite', 'task.write')) k(key, permission));
end;
$$;

comment on function ql_api.project_view_v1(uuid, uuid) is
'Returns found {projectId, project, projectStatus, subject, subjectKind, role, runRead, runStart, runStop, taskWrite: '
'allow | deny | approval_required} | invalid (project_id, subject_id) | not_found (project: also without an '
'active binding). Raises nothing on input.';
grant execute on function ql_api.project_view_v1(uuid, uuid) to ql_runtime;

commit;
