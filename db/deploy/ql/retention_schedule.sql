-- Deploy qinglong:ql/retention_schedule to pg
-- FROZEN COPY of db/schema/ql/retention_schedule.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
-- Schedules the daily retention cycle with pg_cron, as the least-privilege role ql_scheduler (which may execute
-- ql_api.retain and its two functions, nothing else of retention), when pg_cron serves this database, as
-- ql/converge_schedule does. Otherwise it deploys cleanly and says so: run `CALL ql_api.retain()` once a day
-- from another scheduler.
begin;

do $$
begin
  if pg_catalog.current_setting('cron.database_name', true) is distinct from pg_catalog.current_database() then
    raise notice 'pg_cron does not serve database %: ql_api.retain is not scheduled here', pg_catalog.current_database();
    return;
  end if;
  create extension if not exists pg_cron;
  perform cron.schedule_in_database('qinglong-retention', '17 3 * * *', 'CALL ql_api.retain()',
                                    pg_catalog.current_database(), 'ql_scheduler');
end
$$;

commit;
