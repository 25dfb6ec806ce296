-- Deploy qinglong:ql_api/converge_grace_floor_v1 to pg
-- FROZEN COPY of db/functions/ql_api/converge_grace_floor_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.converge_grace_floor_v1: the smallest grace ql_api.converge accepts: the Workers' stop grace + the runner's 1 s poll.
create or replace function ql_api.converge_grace_floor_v1()
returns bigint
language sql
stable
security definer
set search_path = pg_catalog, pg_temp
-- At an unrenewed Lease expiry the task's runner wrapper (which re-reads its lease file once a second) stops the
-- task: TERM, the Worker's stop grace, KILL (docs/architecture.md §7). So until the Lease expiry + 1000 ms +
-- ql.settings.worker_stop_grace_ms a task of that Lease may still run, and lease-expiry recovery must not declare
-- its Run lost (and retry it elsewhere) earlier. SECURITY DEFINER: ql_api.converge runs as its caller
-- (ql_scheduler), which has no access to schema ql. Reads only.
begin atomic
  select s.worker_stop_grace_ms + 1000 from ql.settings s;
end;

comment on function ql_api.converge_grace_floor_v1() is
'Returns ql.settings.worker_stop_grace_ms + 1000 (ms). Never raises.';
grant execute on function ql_api.converge_grace_floor_v1() to ql_scheduler;

commit;
