-- Revert qinglong:ql/cron_parse from pg
begin;
set local role ql_owner;
drop function ql.cron_parse(text);
commit;
