-- Revert qinglong:ql_api/run_timeline_v2 from pg
begin;
set local role ql_owner;
drop function ql_api.run_timeline_v2(uuid, uuid);
commit;
