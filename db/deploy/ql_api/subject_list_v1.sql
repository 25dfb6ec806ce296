-- Deploy qinglong:ql_api/subject_list_v1 to pg
-- FROZEN COPY of db/functions/ql_api/subject_list_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.subject_list_v1: every subject, by name then id, with its active role bindings.
create or replace function ql_api.subject_list_v1()
returns jsonb
language sql
stable
security definer
set search_path = pg_catalog, pg_temp
-- Never the token digest.
begin atomic
  select jsonb_build_object('status', 'listed', 'subjects', coalesce(jsonb_agg(jsonb_build_object(
           'subjectId', s.id, 'kind', s.kind, 'name', s.name, 'status', s.status, 'createdAtMs', s.created_at_ms,
           'roles', (select coalesce(jsonb_agg(jsonb_build_object('projectId', p.id, 'project', p.name, 'role', b.role)
                                               order by p.name), '[]'::jsonb)
                       from ql.role_bindings b join ql.projects p on p.id = b.project_id
                      where b.subject_id = s.id and b.active))
         order by s.name, s.id), '[]'::jsonb))
    from ql.subjects s;
end;

comment on function ql_api.subject_list_v1() is
'Returns listed {subjects: subjectId, kind, name, status, createdAtMs, roles}, never a token digest. Never '
'raises.';

commit;
