-- Deploy qinglong:ql_api/project_list_v1 to pg
-- FROZEN COPY of db/functions/ql_api/project_list_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.project_list_v1: every Project, by name, with its status, policy version and task count.
create or replace function ql_api.project_list_v1()
returns jsonb
language sql
stable
security definer
set search_path = pg_catalog, pg_temp
begin atomic
  select jsonb_build_object('status', 'listed', 'projects', coalesce(jsonb_agg(jsonb_build_object(
           'projectId', p.id, 'name', p.name, 'status', p.status, 'version', p.version,
           'tasks', (select count(*) from ql.tasks t where t.project_id = p.id), 'createdAtMs', p.created_at_ms)
         order by p.name), '[]'::jsonb))
    from ql.projects p;
end;

comment on function ql_api.project_list_v1() is
'Returns listed {projects: projectId, name, status, version, tasks, createdAtMs}. Never raises.';

commit;
