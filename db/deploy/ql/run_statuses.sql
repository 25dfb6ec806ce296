-- Deploy qinglong:ql/run_statuses to pg
-- FROZEN COPY of db/functions/ql/run_statuses.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql.run_statuses: the statuses a Project's Runs (or one task's) are in, found by a skip scan of a history index.
create or replace function ql.run_statuses(p_project_id uuid, p_task_id uuid default null)
returns ql.run_status[]
language plpgsql
stable
as $$
-- One index descent per status present (ql.runs_history_status_idx, or with a task ql.runs_history_task_status_idx),
-- never a scan of the Runs: the statuses are few, the Runs many. Readers that want a whole history merge one range
-- of the same index per status found (ql_api.run_list_v1's pages, ql_api.retention_maintain_v1's old-Run probe).
begin
  if p_task_id is null then
    return array(with recursive s (status) as (
                   (select r.status from ql.runs r where r.project_id = p_project_id order by r.status limit 1)
                   union all
                   select (select r.status from ql.runs r where r.project_id = p_project_id and r.status > s.status
                            order by r.status limit 1)
                     from s where s.status is not null)
                 select s.status from s where s.status is not null);
  end if;
  return array(with recursive s (status) as (
                 (select r.status from ql.runs r where r.project_id = p_project_id and r.task_id = p_task_id
                   order by r.status limit 1)
                 union all
                 select (select r.status from ql.runs r where r.project_id = p_project_id and r.task_id = p_task_id
                            and r.status > s.status order by r.status limit 1)
                   from s where s.status is not null)
               select s.status from s where s.status is not null);
end;
$$;

comment on function ql.run_statuses(uuid, uuid) is
'Returns the distinct statuses of the Project''s Runs (of the task''s, when given), in order; empty when it has none. '
'Never raises.';

commit;
