-- Revert qinglong:ql_api/notify_result_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.notify_result_v1(uuid, integer, boolean, integer, text, integer);
commit;
