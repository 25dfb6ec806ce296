-- Deploy qinglong:ql_api/schedule_next_fire_v1 to pg
-- FROZEN COPY of db/functions/ql_api/schedule_next_fire_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.schedule_next_fire_v1: the earliest next fire time of any schedule (what ql_api.schedule_tick sleeps until).
-- Lock order: none (one index read of ql.task_schedules_due_idx).
create or replace function ql_api.schedule_next_fire_v1()
returns bigint
language sql
stable
security definer
set search_path = pg_catalog, pg_temp
return (select pg_catalog.min(s.next_fire_at_ms) from ql.task_schedules s);

comment on function ql_api.schedule_next_fire_v1() is
'Returns the earliest next_fire_at_ms of ql.task_schedules (ms), NULL when there is no schedule. Never raises.';
grant execute on function ql_api.schedule_next_fire_v1() to ql_scheduler;

commit;
