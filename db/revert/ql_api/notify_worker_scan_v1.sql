-- Revert qinglong:ql_api/notify_worker_scan_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.notify_worker_scan_v1(integer);
commit;
