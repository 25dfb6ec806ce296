-- Schedules the retention cycle with pg_cron every five minutes (at 2, 7, …, 57: away from the minute's convergence),
-- as the least-privilege role ql_scheduler (which may execute ql_api.retain and the functions it calls, nothing else
-- of retention), when pg_cron serves this database, as ql/converge_schedule does. Otherwise it deploys cleanly and
-- says so: run `CALL ql_api.retain()` every few minutes from another scheduler.
begin;

do $$
begin
  if pg_catalog.current_setting('cron.database_name', true) is distinct from pg_catalog.current_database() then
    raise notice 'pg_cron does not serve database %: ql_api.retain is not scheduled here', pg_catalog.current_database();
    return;
  end if;
  create extension if not exists pg_cron;
  perform cron.schedule_in_database('qinglong-retention', '2-59/5 * * * *', 'CALL ql_api.retain()',
                                    pg_catalog.current_database(), 'ql_scheduler');
end
$$;

commit;
