-- ql_api.subject_projects_v1: the Projects a subject may read, and its Runs there whose id starts with a prefix.
-- Lock order: none (one snapshot read).
create or replace function ql_api.subject_projects_v1(p_subject_id uuid, p_run_prefix text default null)
returns jsonb
language plpgsql
stable
security definer
set search_path = pg_catalog, pg_temp
as $$
-- For a route that names no Project (subject_admission_v1 admitted the subject), so the policy is decided here,
-- per Project, by the rules admission decides by (ql.admission_reason): a Project is listed when the subject is
-- active and its active binding there allows run.read now. Nothing else is ever read: not another Project, not
-- a Run outside the listed ones. p_run_prefix (8 to 32 lower-case hex digits of an id, hyphens left out) also
-- answers the Runs of those Projects whose id starts with it, by id, at most 10, and whether there are more:
-- one range scan of the Runs' primary key (a uuid sorts as its hex digits do). Null: no Runs are looked for.
declare
  v_subject ql.subjects;
  v_projects uuid[];
  v_runs jsonb := '[]'::jsonb;
begin
  if p_subject_id is null then return ql.outcome('invalid', 'subject_id'); end if;
  if p_run_prefix !~ '^[0-9a-f]{8,32}$' then return ql.outcome('invalid', 'run_id'); end if;
  select * into v_subject from ql.subjects s where s.id = p_subject_id and s.status = 'active';
  select coalesce(array_agg(b.project_id), '{}') into v_projects
    from ql.role_bindings b join ql.projects p on p.id = b.project_id
   where b.subject_id = v_subject.id and b.active
     and ql.admission_reason(p.status, b.role, v_subject.kind, 'run.read') = 'ok';

  if p_run_prefix is not null then
    select coalesce(jsonb_agg(jsonb_build_object('runId', m.id, 'projectId', m.project_id, 'project', m.project,
                                                 'taskName', m.task_name, 'status', m.status) order by m.id), '[]')
      into v_runs
      from (select r.id, r.project_id, p.name as project, t.name as task_name, r.status
              from ql.runs r
              join ql.projects p on p.id = r.project_id
              join ql.tasks t on t.id = r.task_id
             where r.id between rpad(p_run_prefix, 32, '0')::uuid and rpad(p_run_prefix, 32, 'f')::uuid
               and r.project_id = any (v_projects)
             order by r.id limit 11) m;
  end if;
  return jsonb_build_object(
    'status', 'listed',
    'projects', coalesce((
      select jsonb_agg(jsonb_build_object('projectId', p.id, 'project', p.name, 'projectStatus', p.status,
                                          'role', b.role) order by p.name)
        from ql.projects p join ql.role_bindings b on b.project_id = p.id and b.subject_id = v_subject.id
       where p.id = any (v_projects)), '[]'),
    'runs', coalesce((select jsonb_agg(e.value order by e.n) from jsonb_array_elements(v_runs) with ordinality e(value, n)
                       where e.n <= 10), '[]'),
    'moreRuns', jsonb_array_length(v_runs) > 10);
end;
$$;

comment on function ql_api.subject_projects_v1(uuid, text) is
'Returns listed {projects: [{projectId, project, projectStatus, role}] (by name), runs: [{runId, projectId, project, '
'taskName, status}] (by id, at most 10), moreRuns} | invalid (subject_id, run_id: a prefix not of 8 to 32 lower-case '
'hex digits). A disabled or unknown subject lists nothing. Raises nothing on input.';
grant execute on function ql_api.subject_projects_v1(uuid, text) to ql_runtime;
