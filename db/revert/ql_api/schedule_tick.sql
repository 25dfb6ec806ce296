-- Revert qinglong:ql_api/schedule_tick from pg
begin;
set local role ql_owner;
drop procedure ql_api.schedule_tick(numeric);
commit;
