-- Revert qinglong:ql/notify_run_event from pg
begin;
set local role ql_owner;
drop function ql.notify_run_event();
commit;
