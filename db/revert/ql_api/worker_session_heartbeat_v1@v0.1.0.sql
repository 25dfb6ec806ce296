-- Revert qinglong:ql_api/worker_session_heartbeat_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.worker_session_heartbeat_v1(uuid, uuid, bigint);
commit;
