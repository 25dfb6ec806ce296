-- Schedules ql_api.schedule_tick with pg_cron every minute, as the least-privilege role ql_scheduler, when pg_cron
-- serves this database, as ql/converge_schedule does: each run handles fire times second by second until the end of
-- its minute. Otherwise it deploys cleanly and says so: run `CALL ql_api.schedule_tick()` every minute from another
-- scheduler (without it, ql_api.converge still fires schedules once a minute).
begin;

do $$
begin
  if pg_catalog.current_setting('cron.database_name', true) is distinct from pg_catalog.current_database() then
    raise notice 'pg_cron does not serve database %: ql_api.schedule_tick is not scheduled here',
      pg_catalog.current_database();
    return;
  end if;
  create extension if not exists pg_cron;
  perform cron.schedule_in_database('qinglong-schedule', '* * * * *', 'CALL ql_api.schedule_tick()',
                                    pg_catalog.current_database(), 'ql_scheduler');
end
$$;

commit;
