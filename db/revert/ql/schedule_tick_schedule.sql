-- Revert qinglong:ql/schedule_tick_schedule from pg
-- Removes the job; the pg_cron extension stays (other jobs may use it).
begin;

do $$
begin
  if pg_catalog.to_regclass('cron.job') is not null then
    perform cron.unschedule(j.jobid) from cron.job j where j.jobname = 'qinglong-schedule';
  end if;
end
$$;

commit;
