-- Verify qinglong:ql/schedule_tick_schedule on pg
-- Where pg_cron serves this database, exactly one job runs ql_api.schedule_tick as ql_scheduler.
do $$
begin
  if pg_catalog.current_setting('cron.database_name', true) is not distinct from pg_catalog.current_database() then
    if (select pg_catalog.count(*) from cron.job j
        where j.jobname = 'qinglong-schedule' and j.username = 'ql_scheduler'
          and j.command = 'CALL ql_api.schedule_tick()' and j.database = pg_catalog.current_database()) <> 1 then
      raise exception 'the qinglong-schedule pg_cron job is missing';
    end if;
  end if;
end
$$;
