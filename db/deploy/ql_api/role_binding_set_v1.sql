-- Deploy qinglong:ql_api/role_binding_set_v1 to pg
-- FROZEN COPY of db/functions/ql_api/role_binding_set_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.role_binding_set_v1: grant, change or revoke a subject's role in a project (an operator's command).
-- Lock order: project (FOR NO KEY UPDATE; conflicts with the FOR SHARE of ql.policy_fence) → binding.
create or replace function ql_api.role_binding_set_v1(
  p_project_id uuid,
  p_subject_id uuid,
  p_role text,
  p_active boolean
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- Every change bumps the binding's version AND the project's version in one transaction, so an
-- admission taken before it is fenced by ql.policy_fence in any later mutation.
declare
  v_project ql.projects;
  v_binding ql.role_bindings;
begin
  if p_project_id is null then return ql.outcome('invalid', 'project_id'); end if;
  if p_subject_id is null then return ql.outcome('invalid', 'subject_id'); end if;
  if p_role is null or p_role not in ('owner', 'admin', 'operator', 'viewer') then return ql.outcome('invalid', 'role'); end if;
  if p_active is null then return ql.outcome('invalid', 'active'); end if;

  if not exists (select 1 from ql.subjects s where s.id = p_subject_id) then return ql.outcome('not_found', 'subject'); end if;
  update ql.projects p set version = p.version + 1 where p.id = p_project_id returning * into v_project;
  if v_project.id is null then return ql.outcome('not_found', 'project'); end if;

  insert into ql.role_bindings as b (project_id, subject_id, role, active)
  values (p_project_id, p_subject_id, p_role, p_active)
  on conflict (project_id, subject_id) do update set role = excluded.role, active = excluded.active, version = b.version + 1
  returning * into v_binding;
  return jsonb_build_object('status', 'set', 'projectVersion', v_project.version, 'bindingVersion', v_binding.version,
                            'role', v_binding.role, 'active', v_binding.active);
end;
$$;

comment on function ql_api.role_binding_set_v1(uuid, uuid, text, boolean) is
'Returns set {projectVersion, bindingVersion, role, active} | invalid | not_found (project, subject). Raises '
'nothing on input.';

commit;
