-- Revert qinglong:ql/converge_schedule from pg
-- Removes the job; the pg_cron extension stays (other jobs may use it).
begin;

do $$
begin
  if pg_catalog.to_regclass('cron.job') is not null then
    perform cron.unschedule(j.jobid) from cron.job j where j.jobname = 'qinglong-converge';
  end if;
end
$$;

commit;
