-- Revert qinglong:ql_api/worker_status_set_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.worker_status_set_v1(text, boolean);
commit;
