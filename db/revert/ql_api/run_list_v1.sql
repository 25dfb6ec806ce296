-- Revert qinglong:ql_api/run_list_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.run_list_v1(uuid, uuid, text, bigint, bigint, integer, text);
commit;
