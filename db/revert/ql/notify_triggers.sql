-- Revert qinglong:ql/notify_triggers from pg
begin;
set local role ql_owner;

drop trigger schedule_fires_notify on ql.schedule_fires;
drop trigger run_events_notify on ql.run_events;

commit;
