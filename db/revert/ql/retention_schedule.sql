-- Revert qinglong:ql/retention_schedule from pg
-- Removes the job; the pg_cron extension stays (other jobs use it).
begin;

do $$
begin
  if pg_catalog.to_regclass('cron.job') is not null then
    perform cron.unschedule(j.jobid) from cron.job j where j.jobname = 'qinglong-retention';
  end if;
end
$$;

commit;
