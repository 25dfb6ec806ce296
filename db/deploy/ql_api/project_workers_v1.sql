-- Deploy qinglong:ql_api/project_workers_v1 to pg
-- FROZEN COPY of db/functions/ql_api/project_workers_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.project_workers_v1: the Workers that serve one Project, least disclosure (the user API, run.read).
create or replace function ql_api.project_workers_v1(p_project_id uuid)
returns jsonb
language plpgsql
stable
security definer
set search_path = pg_catalog, pg_temp
as $$
-- Least disclosure: only the Workers whose pool one of the
-- Project's tasks uses (its current revision's plan pool, 'default' when the plan names none), and of each only
-- its name, pool, generation, status, online, last contact and the number of THIS Project's Attempts it holds
-- (claimed, starting, running) — never its id, certificate fingerprint, sessions or other Projects' work.
-- online and lastContactAtMs: ql.worker_presence, as in ql_api.worker_list_v1. Reads only.
begin
  if p_project_id is null then return ql.outcome('invalid', 'project_id'); end if;
  return (
    select jsonb_build_object('status', 'listed', 'workers', coalesce(jsonb_agg(
             ql.worker_presence(w.id) || jsonb_build_object(
               'name', w.name, 'pool', w.pool, 'generation', w.generation, 'status', w.status,
               'activeAttempts', (select count(*) from ql.run_attempts a join ql.runs r on r.id = a.run_id
                                   where a.worker_id = w.id and r.project_id = p_project_id
                                     and a.ended_at_ms is null))
           order by w.name, w.id), '[]'::jsonb))
      from ql.workers w
     where w.pool in (select coalesce(r.plan_json ->> 'pool', 'default')
                        from ql.tasks t join ql.task_execution_revisions r on r.id = t.current_revision_id
                       where t.project_id = p_project_id));
end;
$$;

comment on function ql_api.project_workers_v1(uuid) is
'Returns listed {workers: name, pool, generation, status, online, lastContactAtMs, activeAttempts (this '
'Project''s)}, never an id or a fingerprint | invalid (project_id). Raises nothing on input.';
grant execute on function ql_api.project_workers_v1(uuid) to ql_runtime;

commit;
