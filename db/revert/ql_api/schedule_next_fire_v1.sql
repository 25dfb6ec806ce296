-- Revert qinglong:ql_api/schedule_next_fire_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.schedule_next_fire_v1();
commit;
