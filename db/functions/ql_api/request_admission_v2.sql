-- ql_api.request_admission_v2: request_admission_v1 for a project named by its id or its unique name.
-- Lock order: none (reads; v1's at most one insert).
create or replace function ql_api.request_admission_v2(
  p_token_digest bytea,
  p_project text,
  p_permission text,
  p_route text,
  p_request_id text
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- The shell binds the id an allow names, never the text of the path. A name is resolved before admission and admission decides as v1 does: an unknown name is
-- project.not_found exactly like a project the subject has no binding on, so names cannot be enumerated
-- either (the audit row records the nil uuid as the project). v1 stays for shells of the previous release.
declare
  v_id uuid;
  v_answer jsonb;
begin
  if p_project is null or length(p_project) not between 1 and 200 then return ql.outcome('invalid', 'project_id'); end if;
  if p_project ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' then
    v_id := p_project::uuid;
  else
    select p.id into v_id from ql.projects p where p.name = p_project;
  end if;
  v_answer := ql_api.request_admission_v1(p_token_digest, coalesce(v_id, '00000000-0000-0000-0000-000000000000'),
                                          p_permission, p_route, p_request_id);
  if v_answer ->> 'decision' is distinct from 'allow' then return v_answer; end if;  -- invalid, deny, approval
  return v_answer || jsonb_build_object('projectId', v_id);
end;
$$;

comment on function ql_api.request_admission_v2(bytea, text, text, text, text) is
'Returns request_admission_v1''s answer, with projectId (the resolved id) when the decision is allow; an '
'unknown name is project.not_found. Raises nothing on input.';
grant execute on function ql_api.request_admission_v2(bytea, text, text, text, text) to ql_runtime;
