-- ql_api.secret_list_v1: the secrets of one Project: names, versions, sizes, who set them and when, never a value.
create or replace function ql_api.secret_list_v1(p_project text)
returns jsonb
language plpgsql
stable
security definer
set search_path = pg_catalog, pg_temp
as $$
-- Current secrets only (a deleted one is not listed), by name, each with its current version, that version's size,
-- the subject who set it and when, and how many versions it has had. Another Project's secrets never appear. Reads
-- only. Operators call it as a DBA; the user API (`secret.read`) calls it with the admitted id.
declare
  v_project ql.projects;
begin
  if p_project is null or length(p_project) not between 1 and 200 then return ql.outcome('invalid', 'project_id'); end if;
  v_project := ql.project_named(p_project);
  if v_project.id is null then return ql.outcome('not_found', 'project'); end if;
  return jsonb_build_object('status', 'listed', 'projectId', v_project.id, 'project', v_project.name, 'secrets',
    (select coalesce(jsonb_agg(jsonb_build_object(
              'name', s.name, 'version', s.current_version, 'size', v.size, 'setBy', u.name,
              'setAtMs', v.created_at_ms, 'createdAtMs', s.created_at_ms) order by s.name), '[]'::jsonb)
       from ql.secrets s
       join ql.secret_versions v on v.secret_id = s.id and v.version = s.current_version
       join ql.subjects u on u.id = v.created_by
      where s.project_id = v_project.id and s.current_version > 0));
end;
$$;

comment on function ql_api.secret_list_v1(text) is
'Returns listed {projectId, project, secrets: [{name, version, size, setBy, setAtMs, createdAtMs}]} | invalid '
'(project_id) | not_found (project). Raises nothing on input.';
grant execute on function ql_api.secret_list_v1(text) to ql_runtime;
