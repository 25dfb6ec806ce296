-- Revert qinglong:ql/notify_schedule_skipped from pg
begin;
set local role ql_owner;
drop function ql.notify_schedule_skipped();
commit;
