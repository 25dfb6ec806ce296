-- Revert qinglong:ql/cron_next from pg
begin;
set local role ql_owner;
drop function ql.cron_next(ql.cron_spec, text, timestamptz);
commit;
