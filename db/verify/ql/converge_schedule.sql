-- Verify qinglong:ql/converge_schedule on pg
-- Where pg_cron serves this database, exactly one job runs ql_api.converge as ql_scheduler.
do $$
begin
  if pg_catalog.current_setting('cron.database_name', true) is not distinct from pg_catalog.current_database() then
    if (select pg_catalog.count(*) from cron.job j
        where j.jobname = 'qinglong-converge' and j.username = 'ql_scheduler'
          and j.command = 'CALL ql_api.converge()' and j.database = pg_catalog.current_database()) <> 1 then
      raise exception 'the qinglong-converge pg_cron job is missing';
    end if;
  end if;
end
$$;
