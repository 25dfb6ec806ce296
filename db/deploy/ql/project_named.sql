-- Deploy qinglong:ql/project_named to pg
-- FROZEN COPY of db/functions/ql/project_named.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql.project_named: the Project a caller names by its id or by its unique name.
create or replace function ql.project_named(p_project text)
returns ql.projects
language plpgsql
stable
strict
as $$
-- A text that is a uuid names a Project by id first; otherwise, or when no Project has that id, by name.
-- PL/pgSQL, not SQL: the uuid cast must run only after the pattern matched (a planner may fold a cast early).
declare
  v_project ql.projects;
begin
  if p_project ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' then
    select * into v_project from ql.projects p where p.id = p_project::uuid;
  end if;
  if v_project.id is null then
    select * into v_project from ql.projects p where p.name = p_project;
  end if;
  return v_project;
end;
$$;

comment on function ql.project_named(text) is
'Returns the Project with id p_project, else the one named p_project, else a row of NULLs. Never raises.';

commit;
