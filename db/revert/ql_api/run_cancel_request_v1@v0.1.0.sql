-- Revert qinglong:ql_api/run_cancel_request_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.run_cancel_request_v1(uuid, uuid, uuid, text, bigint, bigint);
commit;
