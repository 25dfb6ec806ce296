-- ql_api.project_create_v1: create a Project by name, or find the one that has it (an operator's command).
create or replace function ql_api.project_create_v1(p_name text)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_id uuid;
begin
  if p_name is null or p_name !~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$' then return ql.outcome('invalid', 'name'); end if;
  if ql.name_is_uuid(p_name) then
    return ql.outcome('invalid', 'name') || jsonb_build_object('detail', 'a name that reads as a uuid would be taken for an id');
  end if;
  insert into ql.projects (name) values (p_name) on conflict (name) do nothing returning id into v_id;
  if v_id is not null then
    return jsonb_build_object('status', 'created', 'projectId', v_id);
  end if;
  select p.id into strict v_id from ql.projects p where p.name = p_name;
  return jsonb_build_object('status', 'exists', 'projectId', v_id);
end;
$$;

comment on function ql_api.project_create_v1(text) is
'Returns created | exists {projectId} | invalid (name; a name that reads as a uuid, ql.name_is_uuid, with a detail). '
'Raises nothing on input.';
