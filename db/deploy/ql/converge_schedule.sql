-- Deploy qinglong:ql/converge_schedule to pg
-- FROZEN COPY of db/schema/ql/converge_schedule.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
-- Schedules one global convergence cadence with pg_cron, as the least-privilege role ql_scheduler,
-- when pg_cron serves this database (it is preloaded and cron.database_name names this database).
-- Otherwise it deploys cleanly and says so: run `CALL ql_api.converge()` from another scheduler.
-- pg_cron 1.4 (Debian 12) has minute granularity; the cycle itself is bounded (pages × page size).
begin;

do $$
begin
  if pg_catalog.current_setting('cron.database_name', true) is distinct from pg_catalog.current_database() then
    raise notice 'pg_cron does not serve database %: ql_api.converge is not scheduled here', pg_catalog.current_database();
    return;
  end if;
  create extension if not exists pg_cron;
  perform cron.schedule_in_database('qinglong-converge', '* * * * *', 'CALL ql_api.converge()',
                                    pg_catalog.current_database(), 'ql_scheduler');
end
$$;

commit;
