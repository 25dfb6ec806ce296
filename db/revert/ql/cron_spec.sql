-- Revert qinglong:ql/cron_spec from pg
begin;
drop type ql.cron_spec;
commit;
